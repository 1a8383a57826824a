"""The driver: the composition root of a training run.

Sync mode, as in the GSPO paper: collect groups with weights v -> group advantages ->
learner step -> push weights v+1 -> log. Async mode overlaps generation and training within
a staleness bound (actors/pipeline.py). Everything heavy lives behind `actors/`.
"""

from __future__ import annotations

import dataclasses
import functools
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from app.run import Run, run_dir
from arl.config import Config, require_extras
from arl.gspo import group_advantages
from arl.metrics import Metrics, rollout_metrics
from envs.registry import OUTCOME_KINDS


class NonFiniteError(RuntimeError):
    """Too many optimizer steps in a row had a non-finite loss or gradient."""


@dataclass(frozen=True)
class StartStates:
    """The groups of one step: env seeds, their group ids, and which worker plays which."""

    env_seeds: list[int]
    group_ids: list[int]


def start_states(cfg: Config, step: int) -> StartStates:
    """Distinct, reproducible start states for every group of every step."""
    n = cfg.rollout.groups_per_step
    ids = [step * n + g for g in range(n)]
    seeds = np.random.SeedSequence([cfg.seed, step]).generate_state(n, dtype=np.uint32)
    return StartStates([int(s) for s in seeds], ids)


def train(cfg: Config, use_ray: bool = True) -> Metrics:
    """Run `cfg.steps` GSPO steps (sync or async mode); return the last step's metrics.

    SIGTERM (`ray job stop`, `kill`) or Ctrl-C lets the current step finish, saves a
    checkpoint and raises `Stopped`; `resume=auto` continues from there.
    """
    # The first line of a run's (or a Ray job's) log says where its outputs go.
    print(f"arl train: run directory {run_dir(cfg)}", flush=True)
    require_extras(cfg)  # before Ray starts: a missing extra is a config error
    from actors.loop import Cluster  # heavy (ray, torch models): imported when training starts
    from learner.gguf import prepare_model

    # A GGUF model is converted once into a cached HF directory that every worker loads.
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(
        cfg.model, path=prepare_model(cfg.model.path)))
    with Run(cfg) as run, Cluster(cfg, use_ray=use_ray) as cluster, _StopOnSignal() as stop:
        resumed = cluster.load_checkpoint(run.resume_from) if run.resume_from else {}
        run.open_sinks(wandb_run_id=resumed.get("wandb_run_id"))
        cluster.push_weights(version=run.start_step)
        metrics: Metrics = {}
        steps = _sync_steps if cfg.mode == "sync" else _async_steps
        for step, done in steps(cfg, cluster, run.start_step):
            t_end = time.perf_counter()
            if cfg.learner.checkpoint_every and (step + 1) % cfg.learner.checkpoint_every == 0:
                _save_checkpoint(run, cluster, step + 1)
            keep, learner_metrics = done.keep, done.learner_metrics
            metrics = {
                **rollout_metrics(done.batch.summaries, cfg.rollout.group_size,
                                  OUTCOME_KINDS.get(cfg.env.name, ())),
                "rollout/masked_groups": float((~keep).sum() / cfg.rollout.group_size),
                "rollout/actor_restarts": float(cluster.actor_restarts),
                **learner_metrics,
                **_async_metrics(done),
                **_timing(done.times, t_end, done.batch.sampled_tokens, learner_metrics),
            }
            run.log_samples(step, done.batch.summaries)
            run.log(step, metrics)
            if learner_metrics["learner/skipped_in_row"] >= cfg.learner.max_nonfinite_in_row:
                _checkpoint_and_raise(run, cluster, step + 1, NonFiniteError, (
                    f"{cfg.learner.max_nonfinite_in_row} optimizer steps in a row had a "
                    "non-finite loss or gradient (learner.max_nonfinite_in_row); none was "
                    f"applied (check the rewards and the learning rate); stopped after step "
                    f"{step + 1}"))
            if stop.requested:
                name = signal.Signals(stop.signum).name
                _checkpoint_and_raise(run, cluster, step + 1, functools.partial(
                    Stopped, signum=stop.signum), f"stopped by {name} after step {step + 1}")
        if not run.has_checkpoint(cfg.steps):
            _save_checkpoint(run, cluster, cfg.steps)
    return metrics


@dataclass
class StepDone:
    """One step's results as either mode hands them to the driver loop."""

    batch: Any  # actors.loop.RolloutBatch
    keep: np.ndarray  # [B] groups kept for the learner
    learner_metrics: dict[str, Any]
    times: tuple[float, float, float, float]  # start, batch ready, trained, weights out
    staleness: list[int] = field(default_factory=list)  # learner - policy version, per episode
    dropped_stale: int = 0  # trajectories dropped as too stale this step
    rollout_idle: float = 0.0  # mean seconds a rollout worker had nothing to do


def _transcripts(cfg: Config, step: int) -> int:
    every = cfg.wandb.samples_every
    return cfg.wandb.samples if every and step % every == 0 else 0


def _sync_steps(cfg: Config, cluster: Any, start: int) -> Iterator[tuple[int, StepDone]]:
    """Sync mode, as in the GSPO paper: collect with weights v, train, push v + 1."""
    for step in range(start, cfg.steps):
        t0 = time.perf_counter()
        states = start_states(cfg, step)
        batch = cluster.collect(states.env_seeds, states.group_ids, seed=cfg.seed + step,
                                transcripts=_transcripts(cfg, step))
        t1 = time.perf_counter()
        advantages, keep = _advantages(cfg, batch.summaries)
        learner_metrics = cluster.learner_step(batch, advantages, keep)
        t2 = time.perf_counter()
        cluster.push_weights(version=step + 1)
        t3 = time.perf_counter()
        yield step, StepDone(batch, keep, learner_metrics, (t0, t1, t2, t3),
                             staleness=[0] * len(batch.summaries), rollout_idle=t3 - t1)


def _async_steps(cfg: Config, cluster: Any, start: int) -> Iterator[tuple[int, StepDone]]:
    """Async mode (actors/pipeline.py): workers keep generating within `max_staleness`
    versions while the learner trains; weights are published without stopping them."""
    from actors.pipeline import AsyncRollouts, chunk_args

    source = AsyncRollouts(cluster, cfg.max_staleness, start * cfg.rollout.num_workers,
                           chunk_args(cfg, start_states, lambda step: _transcripts(cfg, step)))
    try:
        for step in range(start, cfg.steps):
            t0 = time.perf_counter()
            batch, stats = source.next_batch(step)
            t1 = time.perf_counter()
            advantages, keep = _advantages(cfg, batch.summaries)
            ref = cluster.submit_learner_step(batch, advantages, keep)
            learner_metrics = source.wait_for(ref, step)
            t2 = time.perf_counter()
            cluster.publish_weights(version=step + 1)
            t3 = time.perf_counter()
            yield step, StepDone(batch, keep, learner_metrics, (t0, t1, t2, t3),
                                 stats.staleness, stats.dropped_trajectories,
                                 source.take_rollout_idle())
    finally:
        source.drain()


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


class Stopped(RuntimeError):
    """The run was asked to stop (SIGTERM, Ctrl-C) and saved a checkpoint first. `signum`
    is the signal (the command exits with 128 + signum)."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


class _StopOnSignal:
    """Turns SIGTERM and the first SIGINT (Ctrl-C) into a flag checked between steps; a
    second SIGINT stops at once (KeyboardInterrupt). Only the main thread can install
    handlers; elsewhere the signals keep theirs. Restores the handlers on exit."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def __enter__(self) -> _StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now, without a checkpoint
        if self.signum is None:
            self.signum = signum
            if signum == signal.SIGINT:
                print("\narl: finishing this step, then saving a checkpoint "
                      "(Ctrl-C again to stop at once)", file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)


def _advantages(cfg: Config, summaries) -> tuple[np.ndarray, np.ndarray]:
    """(advantages [B], keep [B]): group-relative advantages, and a mask that drops every
    group with a failed episode (an env raised: its reward says nothing about the policy)."""
    size = cfg.rollout.group_size
    keep = ~np.array([s.failure is not None for s in summaries]).reshape(-1, size).any(axis=1)
    rewards = torch.tensor([s.reward for s in summaries], dtype=torch.float32).view(-1, size)
    advantages = group_advantages(rewards, cfg.learner.advantage_eps)
    advantages[~torch.from_numpy(keep)] = 0.0
    return advantages.flatten().numpy(), np.repeat(keep, size)


def _save_checkpoint(run: Run, cluster: Any, steps_done: int) -> None:
    """The learner's checkpoint after `steps_done` steps, with the wandb run id to resume;
    then only the newest `learner.keep_checkpoints` are kept."""
    cluster.save_checkpoint(run.checkpoint_dir(steps_done), steps_done,
                            {"wandb_run_id": run.wandb_run_id})
    run.prune_checkpoints(run.cfg.learner.keep_checkpoints)


def _checkpoint_and_raise(run: Run, cluster: Any, steps_done: int,
                          error: Callable[[str], Exception], message: str) -> None:
    """Save a checkpoint after `steps_done` steps (unless checkpoint_every just did), then
    raise `error`: the run stops, and resume=auto continues from that checkpoint."""
    if not run.has_checkpoint(steps_done):
        _save_checkpoint(run, cluster, steps_done)
    path = run.checkpoint_dir(steps_done)
    raise error(f"{message}; checkpoint saved at {path} (resume=auto continues from it)")
