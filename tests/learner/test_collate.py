"""arl/learner/collate.py: right padding, masks and advantages in place, ids kept exactly."""

import dataclasses

import numpy as np
import pytest
import torch

from arl.learner.collate import collate
from arl.types import Trajectory

PAD = 0


def _traj(ids, mask, logprobs=None):
    ids = np.asarray(ids, dtype=np.int32)
    mask = np.asarray(mask, dtype=np.int8)
    if logprobs is None:
        logprobs = np.where(mask == 1, -0.5 - np.arange(len(ids)), 0.0)
    return Trajectory(
        token_ids=ids, loss_mask=mask, sampler_logprobs=np.asarray(logprobs, dtype=np.float32),
        reward=0.0, group_id=0, policy_version=0, num_turns=1, num_tool_calls=1,
        num_invalid_calls=0,
    )


@pytest.fixture
def trajectories():
    return [
        _traj([5, 6, 7, 8, 9], [0, 0, 1, 1, 0]),
        _traj([11, 12, 13, 14, 15, 16, 17, 18, 2**31 - 1], [0, 1, 1, 0, 0, 1, 1, 1, 1]),
        _traj([21, 22, 23], [0, 0, 1]),
    ]


def test_padding_masks_and_advantages_are_placed_right(trajectories):
    batch = collate(trajectories, np.array([0.5, -1.0, 2.0]), pad_id=PAD)
    assert batch.input_ids.shape == (3, 9) and batch.input_ids.dtype == torch.int64
    assert batch.loss_mask.dtype == torch.float32 and batch.sampler_logprobs.dtype == torch.float32
    assert batch.old_logprobs is None and batch.size == 3 and batch.num_tokens == 17
    assert batch.input_ids[0].tolist() == [5, 6, 7, 8, 9, PAD, PAD, PAD, PAD]
    assert batch.attention_mask[0].tolist() == [1] * 5 + [0] * 4
    assert batch.attention_mask[2].tolist() == [1] * 3 + [0] * 6
    assert batch.loss_mask[0].tolist() == [0, 0, 1, 1, 0, 0, 0, 0, 0]
    assert batch.loss_mask[2].tolist() == [0, 0, 1] + [0] * 6
    assert batch.advantages.tolist() == [0.5, -1.0, 2.0]
    assert batch.advantages.dtype == torch.float32
    for i, traj in enumerate(trajectories):
        n = len(traj.token_ids)
        np.testing.assert_array_equal(batch.sampler_logprobs[i, :n].numpy(), traj.sampler_logprobs)
        assert not batch.sampler_logprobs[i, n:].any()


def test_token_ids_survive_exactly(trajectories):
    batch = collate(trajectories, np.zeros(3), pad_id=PAD)
    for i, traj in enumerate(trajectories):
        n = len(traj.token_ids)
        assert batch.input_ids[i, :n].tolist() == traj.token_ids.tolist()
    assert batch.input_ids[1, -1].item() == 2**31 - 1  # largest int32 id, no overflow


def test_sampler_logprobs_off_the_mask_are_zeroed():
    traj = _traj([1, 2, 3], [0, 1, 0], logprobs=[-9.0, -1.0, -9.0])
    batch = collate([traj], np.zeros(1), pad_id=PAD)
    assert batch.sampler_logprobs[0].tolist() == [0.0, -1.0, 0.0]


def test_select_keeps_row_identity_and_trims_padding(trajectories):
    batch = collate(trajectories, np.array([0.5, -1.0, 2.0]), pad_id=PAD)
    batch = batch.with_old_logprobs(torch.arange(27, dtype=torch.float32).view(3, 9))
    picked = batch.select([2, 0])
    assert picked.input_ids.shape == (2, 5)  # longest of the two rows, not of the batch
    assert picked.input_ids[0, :3].tolist() == [21, 22, 23]
    assert picked.input_ids[1].tolist() == [5, 6, 7, 8, 9]
    assert picked.advantages.tolist() == [2.0, 0.5]
    assert picked.old_logprobs.tolist() == [[18, 19, 20, 21, 22], [0, 1, 2, 3, 4]]
    assert torch.equal(picked.loss_mask, batch.loss_mask[[2, 0], :5])


def test_split_covers_every_row_once_in_order(trajectories):
    batch = collate(trajectories * 2, np.arange(6, dtype=np.float32), pad_id=PAD)
    parts = batch.split(4)
    assert [p.size for p in parts] == [4, 2]
    assert torch.cat([p.advantages for p in parts]).tolist() == list(range(6))
    assert parts[1].input_ids.shape == (2, 9)  # rows 4 (len 9) and 5 (len 3)


def test_bad_inputs_are_refused(trajectories):
    with pytest.raises(ValueError, match="at least one"):
        collate([], np.zeros(0), pad_id=PAD)
    with pytest.raises(ValueError, match="advantages"):
        collate(trajectories, np.zeros(2), pad_id=PAD)
    bad = _traj([1, 2, 3], [0, 1, 1])
    bad = Trajectory(**{**bad.__dict__, "loss_mask": np.array([0, 1], dtype=np.int8)})
    with pytest.raises(ValueError, match="trajectory 0"):
        collate([bad], np.zeros(1), pad_id=PAD)
    batch = collate(trajectories, np.zeros(3), pad_id=PAD)
    with pytest.raises(ValueError, match="shape"):
        batch.with_old_logprobs(torch.zeros(3, 4))


def test_turn_advantages_become_per_token_advantages():
    from arl.types import Trajectory, Turn

    ids = np.arange(10, 20, dtype=np.int32)
    mask = np.array([0, 0, 1, 1, 0, 0, 1, 1, 1, 0], dtype=np.int8)
    traj = Trajectory(ids, mask, np.where(mask == 1, -1.0, 0.0).astype(np.float32), 1.0, 0, 0,
                      2, 2, 0, turns=(Turn(2, 4, 0.0, "a"), Turn(6, 9, 1.0, "b")))
    per_turn = np.empty(1, dtype=object)
    per_turn[0] = np.array([-0.5, 2.0], dtype=np.float32)
    batch = collate([traj], per_turn, pad_id=0)
    assert batch.advantages.tolist() == [[0, 0, -0.5, -0.5, 0, 0, 2.0, 2.0, 2.0, 0]]
    assert batch.select([0]).advantages.shape == (1, 10)
    per_turn[0] = np.array([1.0], dtype=np.float32)
    with pytest.raises(ValueError, match="1 turn advantages for 2 turns"):
        collate([traj], per_turn, pad_id=0)


def _rows_traj(rows):
    """One episode recorded as several rows (each: ids, mask), back to back."""
    ids = [i for r in rows for i in r[0]]
    mask = [m for r in rows for m in r[1]]
    starts = tuple(np.cumsum([len(r[0]) for r in rows[:-1]]).tolist())
    return dataclasses.replace(_traj(ids, mask), row_starts=starts)


def test_an_episode_of_k_rows_is_k_sequences_of_weight_one_over_k():
    split = _rows_traj([([5, 6, 7], [0, 1, 1]), ([8, 9, 10, 11], [0, 0, 1, 1])])
    whole = _traj([21, 22, 23], [0, 0, 1])
    batch = collate([split, whole], np.array([2.0, -1.0]), pad_id=PAD)
    assert batch.size == 3
    assert batch.input_ids[:, :4].tolist() == [[5, 6, 7, PAD], [8, 9, 10, 11], [21, 22, 23, PAD]]
    assert batch.loss_mask[1].tolist() == [0, 0, 1, 1]
    assert batch.weights.tolist() == [0.5, 0.5, 1.0]
    assert batch.advantages.tolist() == [1.0, 1.0, -1.0]  # the episode's advantage, halved
    assert batch.sampler_logprobs[1].tolist() == [0, 0, -5.5, -6.5]  # its own slice
    with pytest.raises(ValueError, match="row_starts"):
        collate([dataclasses.replace(whole, row_starts=(3,))], np.array([1.0]), pad_id=PAD)


def test_gspo_loss_does_not_change_when_an_episode_is_split_into_equal_rows():
    """Each row is a sequence with its own ratio, weighted 1/k, and the normaliser sums the
    weights: an episode split into k copies of one row weighs exactly what the row does."""
    from arl.gspo import gspo_loss

    row = ([5, 6, 7, 8], [0, 1, 1, 1])
    other = _traj([9, 10, 11], [0, 1, 1])

    def loss(trajectories):
        batch = collate(trajectories, np.array([1.5, -0.5]), pad_id=PAD)
        old = batch.sampler_logprobs
        new = old + 0.01 * torch.sin(batch.input_ids.float()) * batch.loss_mask  # s != 1
        return gspo_loss(new, old, batch.advantages, batch.loss_mask, 3e-4, 4e-4,
                         float(batch.weights.sum())).loss

    one_row = loss([_traj(*row), other])
    for k in (2, 3):
        assert loss([_rows_traj([row] * k), other]) == pytest.approx(float(one_row), rel=1e-6)
    assert float(one_row) != 0.0


def test_turn_advantages_land_in_the_row_that_holds_each_turn():
    from arl.types import Turn

    split = dataclasses.replace(
        _rows_traj([([5, 6, 7], [0, 1, 1]), ([8, 9, 10], [0, 1, 1])]),
        turns=(Turn(1, 3, 0.0), Turn(4, 6, 1.0)))
    per_turn = np.empty(1, dtype=object)
    per_turn[0] = np.array([2.0, 4.0])
    batch = collate([split], per_turn, pad_id=PAD)
    assert batch.advantages.tolist() == [[0, 1.0, 1.0], [0, 2.0, 2.0]]
