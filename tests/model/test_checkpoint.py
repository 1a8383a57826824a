"""arl/model/checkpoint/store.py: exact round trip through a fresh learner, hash checks, no
pickle."""

import json
import os
import struct

import numpy as np
import pytest
import torch

from arl.learner.gspo_learner import GSPOLearner
from arl.model.checkpoint.store import (
    DATA_FILES,
    MANIFEST_FILE,
    MODEL_FILE,
    OPTIMIZER_TENSORS_FILE,
    CheckpointError,
    LearnerState,
    load_checkpoint,
    save_checkpoint,
)
from arl.types import Trajectory
from tests.builders import learner_cfg

EXTRA = {"run_name": "t", "rollout_seed": 7, "nested": {"a": [1, 2.5, None]}}


@pytest.fixture(scope="session")
def model_dir(tiny_model_dir):
    """The session's random tiny model (tests/conftest.py)."""
    return tiny_model_dir


def _batch(seed, count=8):
    rng = np.random.default_rng(seed)
    trajs = []
    for _ in range(count):
        n = int(rng.integers(8, 20))
        mask = (np.arange(n) >= n // 2).astype(np.int8)
        trajs.append(Trajectory(
            token_ids=rng.integers(7, 260, n).astype(np.int32), loss_mask=mask,
            sampler_logprobs=np.where(mask == 1, -1.0, 0.0).astype(np.float32), reward=0.0,
            group_id=0, policy_version=0, num_turns=1, num_tool_calls=1, num_invalid_calls=0,
        ))
    return trajs, rng.normal(size=count).astype(np.float32)


def _learner(model_dir):
    cfg = learner_cfg(lr=1e-3, mini_batches=2, micro_batch_size=2, weight_decay=0.01,
                        warmup_steps=2, lr_schedule="cosine")
    return GSPOLearner(model_dir, cfg, "bfloat16", total_steps=6, seed=3)


@pytest.fixture(scope="module")
def trained(model_dir, tmp_path_factory):
    """A learner after two steps and its checkpoint."""
    learner = _learner(model_dir)
    for seed in (1, 2):
        learner.step(*_batch(seed))
    path = tmp_path_factory.mktemp("ckpt") / "step_000002"
    save_checkpoint(path, learner.state_dict_for_checkpoint(), step=2, extra_json=EXTRA)
    return learner, path


def _assert_optimizer_equal(a, b):
    assert a["param_groups"] == b["param_groups"]
    assert a["state"].keys() == b["state"].keys()
    for index, entry in a["state"].items():
        assert entry.keys() == b["state"][index].keys()
        for key, value in entry.items():
            assert torch.equal(value, b["state"][index][key]), (index, key)


def _assert_weights_equal(a, b):
    params_b = dict(b.model.named_parameters())
    assert params_b.keys() == dict(a.model.named_parameters()).keys()
    for name, value in a.model.named_parameters():
        assert torch.equal(value, params_b[name]), name


def test_round_trip_resumes_exactly(model_dir, trained):
    learner, path = trained
    checkpoint = load_checkpoint(path)
    assert checkpoint.step == 2 and checkpoint.extra_json == EXTRA
    fresh = _learner(model_dir)
    fresh.load_checkpoint_state(checkpoint.state)
    assert fresh.version == learner.version == 2 and fresh.lr == learner.lr
    _assert_weights_equal(learner, fresh)
    _assert_optimizer_equal(learner.backend.optimizer.state_dict(),
                            fresh.backend.optimizer.state_dict())
    batch = _batch(3)
    assert fresh.step(*batch) == learner.step(*batch)
    _assert_weights_equal(learner, fresh)


def test_manifest_records_step_version_and_hashes(trained):
    _, path = trained
    manifest = json.loads((path / MANIFEST_FILE).read_text())
    assert manifest["step"] == 2 and manifest["policy_version"] == 2
    assert sorted(manifest["files"]) == sorted(DATA_FILES)
    assert sorted(os.listdir(path)) == sorted([*DATA_FILES, MANIFEST_FILE])
    # No temporary directory left behind; the pointer names the checkpoint.
    assert sorted(os.listdir(path.parent)) == sorted([path.name, "latest"])
    assert (path.parent / "latest").read_text() == path.name + "\n"


def test_no_file_is_a_pickle(trained):
    _, path = trained
    for name in os.listdir(path):
        data = (path / name).read_bytes()
        assert not data.startswith((b"\x80", b"PK")), name  # pickle protocol 2+, torch zip
        if name.endswith(".safetensors"):
            (header_len,) = struct.unpack("<Q", data[:8])
            assert isinstance(json.loads(data[8 : 8 + header_len]), dict), name
        else:
            assert isinstance(json.loads(data), dict), name


def _copy(path, tmp_path):
    target = tmp_path / "copy"
    target.mkdir()
    for name in os.listdir(path):
        (target / name).write_bytes((path / name).read_bytes())
    return target


def test_tampered_file_is_refused(trained, tmp_path):
    copy = _copy(trained[1], tmp_path)
    data = bytearray((copy / MODEL_FILE).read_bytes())
    data[-5] ^= 0x01  # one bit of one weight
    (copy / MODEL_FILE).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=f"{MODEL_FILE} fails its sha256 check"):
        load_checkpoint(copy)


def test_truncated_or_missing_file_is_refused(trained, tmp_path):
    copy = _copy(trained[1], tmp_path)
    data = (copy / OPTIMIZER_TENSORS_FILE).read_bytes()
    (copy / OPTIMIZER_TENSORS_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        load_checkpoint(copy)
    (copy / OPTIMIZER_TENSORS_FILE).unlink()
    with pytest.raises(CheckpointError, match="missing"):
        load_checkpoint(copy)
    with pytest.raises(CheckpointError, match="missing"):
        load_checkpoint(tmp_path / "nowhere")


def test_existing_directory_is_not_overwritten(trained):
    learner, path = trained
    with pytest.raises(FileExistsError):
        save_checkpoint(path, learner.state_dict_for_checkpoint(), step=3, extra_json={})
    assert load_checkpoint(path).step == 2


def _tiny_state(step, skipped_in_row=0):
    param = torch.nn.Parameter(torch.full((4,), float(step)))
    optimizer = torch.optim.AdamW([param], lr=1e-3)
    return LearnerState({"w": param.detach()}, optimizer.state_dict(), step, 1, skipped_in_row)


def test_latest_pointer_names_the_newest_checkpoint_and_stays_in_its_directory(tmp_path):
    from arl.model.checkpoint.pointer import LATEST_FILE, read_latest
    from arl.model.checkpoint.runs import latest_checkpoint

    root = tmp_path / "checkpoints"
    assert latest_checkpoint(str(root)) is None
    for step in (1, 2):
        save_checkpoint(root / f"step_{step:06d}", _tiny_state(step, skipped_in_row=step), step,
                        {})
        assert read_latest(root) == root / f"step_{step:06d}"
    assert load_checkpoint(read_latest(root)).state.skipped_in_row == 2
    # A crash between a checkpoint's rename and the pointer's update: the newer folder wins.
    (root / LATEST_FILE).write_text("step_000001\n")
    assert latest_checkpoint(str(root)) == str(root / "step_000002")
    for hostile in ("../step_000002", "/etc", "", "step_000009"):
        (root / LATEST_FILE).write_text(hostile)
        assert read_latest(root) is None, hostile
    (root / LATEST_FILE).unlink()
    assert latest_checkpoint(str(root)) == str(root / "step_000002")
