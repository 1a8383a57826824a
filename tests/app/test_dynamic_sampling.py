"""Dynamic sampling (DAPO): a step trains on exactly `groups_per_step` groups whose rewards
differ, playing further start states until it has them, and reports what it played."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arl.actors.hosts import LocalHost
from arl.actors.rollout_pool import RolloutBatch
from arl.app.train import _advantages, _collect, _first_informative
from arl.gspo import informative_groups
from arl.steps import start_states
from arl.types import EpisodeSummary
from tests.builders import ci_config


def test_informative_groups_are_those_whose_rewards_differ():
    rewards = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.8, 0.0], [1.0, 1.0, 1.0], [-1.0, 1.0, 1.0]])
    assert informative_groups(rewards).tolist() == [False, True, False, True]


class FakeCluster:
    """Plays each group with the rewards `rewards_of(group_id)` (G of them)."""

    def __init__(self, rewards_of):
        self.rewards_of, self.calls = rewards_of, []

    def collect(self, env_seeds, group_ids, seed, transcripts=0):
        self.calls.append((list(group_ids), seed))
        summaries = [EpisodeSummary(r, g, 0, 3, 1, 1, 0, episode_id=g * 4 + i)
                     for g in group_ids for i, r in enumerate(self.rewards_of(g))]
        return RolloutBatch(summaries, [f"refs of {list(group_ids)}"])



def test_dynamic_sampling_refills_the_batch_with_groups_that_teach():
    from arl.config import load_config

    cfg = load_config(["configs/ci.yaml"], ["rollout.groups_per_step=4", "rollout.group_size=4",
                                            "rollout.dynamic_sampling=true",
                                            "rollout.max_resample_rounds=5"], check_paths=False)
    # Every third group (by id) has rewards that differ; the rest are all equal.
    fake = FakeCluster(lambda g: [0.0, 0.8, 0.0, 0.0] if g % 3 == 0 else [0.8] * 4)
    batch, rounds = _collect(cfg, fake, step=2)
    ids = [g for call, _ in fake.calls for g in call]
    assert ids[:4] == start_states(cfg, 2).group_ids  # the first round is sync mode's
    assert len(set(ids)) == len(ids)  # every extra round plays new groups
    informative = [g for g in ids if g % 3 == 0]
    assert len(informative) >= 4 and rounds == len(fake.calls) - 1
    assert len({seed for _, seed in fake.calls}) == len(fake.calls)  # its own sampling seeds
    _, keep = _advantages(cfg, batch.summaries)
    chosen = keep & _first_informative(cfg, batch.summaries, keep)
    trained = sorted({s.group_id for s, k in zip(batch.summaries, chosen, strict=True) if k})
    assert trained == informative[:4]  # exactly the first four that teach, in play order
    assert batch.trajectory_refs == [f"refs of {call}" for call, _ in fake.calls]


def test_dynamic_sampling_stops_after_its_rounds_and_skips_failed_groups():
    from arl.config import load_config

    cfg = load_config(["configs/ci.yaml"], ["rollout.groups_per_step=2", "rollout.group_size=4",
                                            "rollout.dynamic_sampling=true",
                                            "rollout.max_resample_rounds=2"], check_paths=False)
    fake = FakeCluster(lambda g: [0.0] * 4)  # nothing ever teaches
    batch, rounds = _collect(cfg, fake, step=0)
    assert rounds == 2 and len(fake.calls) == 3 and len(batch.summaries) == 3 * 2 * 4
    _, keep = _advantages(cfg, batch.summaries)
    assert not _first_informative(cfg, batch.summaries, keep).any()
    # A failed episode's group is never chosen, even when its rewards differ.
    summaries = [EpisodeSummary(r, 0, 0, 1, 1, 1, 0, failure="env raised" if i == 0 else None)
                 for i, r in enumerate([0.0, 1.0, 0.0, 0.0])]
    _, keep = _advantages(cfg, summaries)
    assert not _first_informative(cfg, summaries, keep).any()


def test_oversampled_groups_join_the_first_call_and_count_as_the_first_extra_round():
    from arl.config import ConfigError, load_config

    base = ["rollout.groups_per_step=4", "rollout.group_size=4", "rollout.dynamic_sampling=true",
            "rollout.max_resample_rounds=3"]
    cfg = load_config(["configs/ci.yaml"], [*base, "rollout.oversample_groups=2"],
                      check_paths=False)
    round0, round1, round2 = (start_states(cfg, 5, r).group_ids for r in range(3))
    teach = set(round0[:3] + round1[:1])  # four that teach once the first call is in
    fake = FakeCluster(lambda g: [0.0, 1.0, 0.0, 0.0] if g in teach else [0.0] * 4)
    batch, calls = _collect(cfg, fake, step=5)
    assert [ids for ids, _ in fake.calls] == [round0 + round1[:2]] and calls == 0
    _, keep = _advantages(cfg, batch.summaries)
    chosen = _first_informative(cfg, batch.summaries, keep)
    assert sorted({s.group_id for s, k in zip(batch.summaries, chosen, strict=True) if k}) == \
        sorted(teach)
    # Not enough: the next call plays the second extra round, then the third; then it stops.
    fake = FakeCluster(lambda g: [0.0] * 4)
    _, calls = _collect(cfg, fake, step=5)
    assert [ids for ids, _ in fake.calls] == [round0 + round1[:2], round2,
                                              start_states(cfg, 5, 3).group_ids]
    assert calls == 2 and len({seed for _, seed in fake.calls}) == 3
    for extra in (["rollout.oversample_groups=5"],
                  ["rollout.oversample_groups=2", "rollout.max_resample_rounds=0"],
                  ["rollout.oversample_groups=2", "rollout.dynamic_sampling=false"]):
        with pytest.raises(ConfigError) as err:
            load_config(["configs/ci.yaml"], [*base, *extra], check_paths=False)
        assert err.value.key == "rollout.oversample_groups"


def test_without_dynamic_sampling_one_round_as_before():
    from arl.config import load_config

    cfg = load_config(["configs/ci.yaml"], [], check_paths=False)
    fake = FakeCluster(lambda g: [0.0] * cfg.rollout.group_size)
    batch, rounds = _collect(cfg, fake, step=1)
    assert rounds == 0 and len(fake.calls) == 1
    assert fake.calls[0] == (start_states(cfg, 1).group_ids, cfg.seed + 1)


def test_a_run_with_dynamic_sampling_reports_what_it_played(tmp_path, warm_model_dir):
    from arl.app.train import train
    from tests.builders import metrics_rows

    cfg = ci_config(warm_model_dir, tmp_path, "rollout.dynamic_sampling=true", "steps=2")
    train(cfg, host=LocalHost())
    rows = metrics_rows(tmp_path / "ci")
    for row in rows:
        assert 0 <= row["rollout/resample_rounds"] <= cfg.rollout.max_resample_rounds
        assert row["rollout/trained_groups"] <= cfg.rollout.groups_per_step
        if row["rollout/resample_rounds"] < cfg.rollout.max_resample_rounds:
            assert row["rollout/trained_groups"] == cfg.rollout.groups_per_step
    assert np.isfinite([r["learner/entropy"] for r in rows]).all()


def test_full_games_train_with_turn_level_advantages(tmp_path, warm_model_dir):
    from arl.app.train import train
    from tests.builders import metrics_rows

    cfg = ci_config(warm_model_dir, tmp_path, "env.name=tictactoe", "env.opponent=random",
                    "env.reward_move_best=0.2", "env.reward_move_blunder=-0.5",
                    "learner.advantage.level=turn", "learner.loss.name=gspo_token",
                    "rollout.max_turns=5",
                    "learner.advantage.step_group_scope=batch", "learner.advantage.turn_discount=0",
                    "env.invalid_action=retry", "env.max_retries=4",
                    "steps=2")
    metrics = train(cfg, host=LocalHost())
    rows = metrics_rows(tmp_path / "ci")
    assert len(rows) == 2 and np.isfinite(metrics["learner/loss"])
    assert metrics["rollout/turns_per_episode"] > 1
    # every game opens on the empty board or one X mark: those turns share their state
    assert all(0 < r["rollout/shared_state_turns"] <= 1 for r in rows)
