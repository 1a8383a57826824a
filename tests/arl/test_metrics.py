"""The demo's run logs every signal users judge a run by, to metrics.jsonl and to wandb."""

from __future__ import annotations

import glob
import json

import numpy as np
import pytest

from arl.actors.hosts import LocalHost
from arl.app.train import train
from arl.config import load_config
from arl.metrics import action_histogram, rollout_metrics
from arl.types import EpisodeSummary, Outcome

REQUIRED = (
    # the rollout signals
    "rollout/reward_mean", "rollout/response_len", "rollout/tool_calls_per_episode",
    "rollout/invalid_tool_call_rate", "rollout/action_entropy", "rollout/action_hist",
    # GSPO diagnostics
    "gspo/ratio_hist", "gspo/clip_fraction_low", "gspo/clip_fraction_high",
    "rollout/zero_variance_groups",
    # learner
    "learner/loss", "learner/grad_norm", "learner/lr",
    # timing (summing to the step) and throughput
    "timing/generate", "timing/train", "timing/weight_sync", "timing/other", "timing/step",
    "perf/rollout_tokens_per_s", "perf/train_tokens_per_s",
    # game outcomes
    "game/win_rate", "game/draw_rate", "game/loss_rate", "game/illegal_rate",
)


RESULTS = {"win": "win", "invalid_call": "invalid", "illegal_move": "invalid"}


def _summary(square, outcome, reward=0.0):
    actions = () if square is None else (square,)
    return EpisodeSummary(reward, 0, 0, 5, 1, 1, 0,
                          outcome=Outcome(outcome, RESULTS.get(outcome), actions))


def test_outcome_rates_and_action_histogram_count_what_happened():
    summaries = [_summary(5, "best"), _summary(5, "win", 1.0), _summary(None, "invalid_call", -1),
                 _summary(9, "illegal_move", -1.0)]
    metrics = rollout_metrics(summaries, group_size=2)
    assert metrics["game/win_rate"] == 0.25 and metrics["game/illegal_rate"] == 0.5
    assert metrics["game/draw_rate"] == metrics["game/loss_rate"] == 0.0
    hist = action_histogram(summaries)
    assert hist.counts == (0, 0, 0, 0, 2, 0, 0, 0, 1) and hist.edges[0] == 0.5


def test_the_demo_run_logs_every_signal_to_jsonl_and_wandb(tmp_path, warm_model_dir):
    cfg = load_config(["configs/tictactoe_move.yaml"], [
        f"model.path={warm_model_dir}", f"output_dir={tmp_path}", "steps=3",
        "rollout.groups_per_step=2", "rollout.group_size=4", "rollout.max_new_tokens=24",
        "rollout.cpus_per_worker=1", "learner.resources.cpus=1",
        "learner.compute.micro_batch_size=4",
        "learner.optim.mini_batches=2", "wandb.samples_every=2", "wandb.samples=2"])
    train(cfg, host=LocalHost())
    run = tmp_path / "tictactoe_move"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    for row in rows:
        missing = [k for k in REQUIRED if row.get(k) is None]
        assert not missing, missing
        parts = sum(row[f"timing/{k}"] for k in ("generate", "train", "weight_sync", "other"))
        assert np.isclose(parts, row["timing/step"])
        assert any(k.startswith("gspo/clip_fraction_len_") for k in row)  # by length bin
        assert sum(row["rollout/action_hist"]["counts"]) <= 8
        assert sum(row["gspo/ratio_hist"]["counts"]) == 8
    (wandb_file,) = glob.glob(str(run / "wandb" / "offline-run-*" / "*.wandb"))
    data = open(wandb_file, "rb").read()
    missing = [k for k in (*REQUIRED, "samples") if k.encode() not in data]
    assert not missing, f"not in the wandb offline file: {missing}"
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert [s["step"] for s in samples] == [0, 0, 2, 2]
    assert all("<tool_call>" in s["conversation"] or "assistant" in s["conversation"]
               for s in samples)
    assert (run / "curves.png").stat().st_size > 10_000


def _episode(turns: list[tuple[float, str | None]], result: str | None) -> EpisodeSummary:
    from arl.types import Outcome, Turn

    return EpisodeSummary(sum(r for r, _ in turns), 0, 0, 5, len(turns), len(turns), 0,
                          outcome=Outcome("end", result),
                          turns=tuple(Turn(0, 1, r, s) for r, s in turns))


def test_turn_metrics_by_turn_index_and_states_per_group():
    from arl.metrics import turn_metrics

    group_a = [_episode([(0.0, "s"), (1.0, "x")], "win"),
               _episode([(0.0, "s"), (0.0, "y"), (-1.0, "z")], "loss")]
    group_b = [_episode([(1.0, "s")], "win"), _episode([(0.5, "t")], "draw")]
    m = turn_metrics(group_a + group_b, group_size=2)
    assert m["turns/reward_t1"] == pytest.approx((0 + 0 + 1 + 0.5) / 4)
    assert m["turns/reward_t2"] == pytest.approx(0.5)  # two episodes reached turn 2
    assert m["turns/reward_t3"] == -1.0
    assert [m[f"turns/ended_t{t}"] for t in (1, 2, 3)] == [0.5, 0.25, 0.25]
    assert [m[f"turns/won_t{t}"] for t in (1, 2, 3)] == [0.25, 0.25, 0.0]
    # group a: turn 1 one state, turn 2 two, turn 3 one; group b: turn 1 two states
    assert m["turns/states_per_group_turn"] == pytest.approx((1 + 2 + 1 + 2) / 4)
    assert "turns/reward_t4" not in m
    assert turn_metrics(group_b, group_size=2) == {}  # single-turn episodes: nothing


def test_nonzero_step_share_counts_turns_the_step_term_teaches():
    from arl.credit import nonzero_step_share

    rewards = [[0.0, 1.0], [0.0, 0.0], [1.0], [1.0]]
    states = [["s", "a"], ["s", "b"], ["s"], ["s"]]
    # group 1: "s" twice with returns 1 and 0 (both non-zero), "a" and "b" once (zero);
    # group 2: "s" twice with equal returns (zero)
    assert nonzero_step_share(rewards, states, 2, 1.0, "group") == pytest.approx(2 / 6)
