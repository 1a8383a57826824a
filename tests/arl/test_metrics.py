"""The demo's run logs every signal users judge a run by, to metrics.jsonl and to wandb."""

from __future__ import annotations

import glob
import json

import numpy as np

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
