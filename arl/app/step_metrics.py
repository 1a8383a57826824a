"""One step's metrics as the driver logs them: what the rollouts say, the learner's own,
async bookkeeping, and timing (whose parts sum to `timing/step`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from arl.actors.rollout_pool import RolloutBatch
from arl.config import Config
from arl.credit import nonzero_step_share, shared_turn_share
from arl.env_spec import resolve_env
from arl.metrics import Metrics, rollout_metrics


@dataclass
class StepDone:
    """One step's results as either mode hands them to the driver loop."""

    batch: RolloutBatch
    keep: np.ndarray  # [B] episodes kept for the learner
    learner_metrics: dict[str, Any]
    times: tuple[float, float, float, float]  # start, batch ready, trained, weights out
    staleness: list[int] = field(default_factory=list)  # learner - policy version, per episode
    dropped_stale: int = 0  # trajectories dropped as too stale this step
    rollout_idle: float = 0.0  # mean seconds a rollout worker had nothing to do
    resample_rounds: int = 0  # dynamic sampling: extra engine calls of start states played


def step_metrics(cfg: Config, done: StepDone, t_end: float, actor_restarts: int) -> Metrics:
    """Every metric of one step (`t_end`: when the step's work was done). The rollout
    signals describe the step's first round of `groups_per_step` groups, so that runs with
    and without dynamic sampling report the same thing: how the policy plays."""
    size, n = cfg.rollout.group_size, cfg.rollout.groups_per_step
    first = done.batch.summaries[: n * size]
    failed = np.array([s.failure is not None for s in first]).reshape(-1, size).any(axis=1)
    return {
        **rollout_metrics(first, size, resolve_env(cfg.env.name).outcomes),
        **_credit_metrics(cfg, done),
        "rollout/masked_groups": float(failed.sum()),
        "rollout/trained_groups": float(done.keep.sum() / size),
        "rollout/resample_rounds": float(done.resample_rounds),
        "rollout/actor_restarts": float(actor_restarts),
        **done.learner_metrics,
        **_async_metrics(done),
        **_timing(done.times, t_end, done.batch.sampled_tokens, done.learner_metrics),
    }


def _credit_metrics(cfg: Config, done: StepDone) -> dict[str, float]:
    """advantage=turn: the share of the batch's turns that share their state with another
    turn of their step-level scope (the rest get only the episode advantage)."""
    if cfg.learner.advantage.level != "turn":
        return {}
    adv, size = cfg.learner.advantage, cfg.rollout.group_size
    states = [[t.state for t in s.turns] for s in done.batch.summaries]
    rewards = [[t.reward for t in s.turns] for s in done.batch.summaries]
    return {"rollout/shared_state_turns": shared_turn_share(states, size, adv.step_group_scope),
            "turns/nonzero_step_advantage": nonzero_step_share(
                rewards, states, size, adv.turn_discount, adv.step_group_scope)}


def _async_metrics(done: StepDone) -> dict[str, float]:
    staleness = done.staleness or [0]
    return {
        "async/staleness_mean": float(np.mean(staleness)),
        "async/staleness_max": float(max(staleness)),
        "async/dropped_stale": float(done.dropped_stale),
        "timing/rollout_idle": done.rollout_idle,
    }


def _timing(times: tuple[float, float, float, float], t_end: float, sampled_tokens: int,
            learner_metrics: dict[str, Any]) -> dict[str, float]:
    """Timing and throughput of one step: times = (start, batch ready, trained, weights
    out); t_end: the step's work done. `timing/other` is the rest, so the parts sum to
    `timing/step`. The learner sat idle while the batch was being waited for."""
    t0, t1, t2, t3 = times
    total = max(time.perf_counter(), t_end) - t0
    return {
        "timing/generate": t1 - t0,
        "timing/train": t2 - t1,
        "timing/weight_sync": t3 - t2,
        "timing/other": total - (t3 - t0),
        "timing/step": total,
        "timing/learner_idle": t1 - t0,
        "perf/rollout_tokens_per_s": sampled_tokens / max(t1 - t0, 1e-9),
        "perf/train_tokens_per_s": learner_metrics["perf/train_tokens"] / max(t2 - t1, 1e-9),
    }
