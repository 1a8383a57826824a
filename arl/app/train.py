"""The driver: the composition root of a training run.

Sync mode, as in the GSPO paper: collect groups with weights v -> group advantages ->
learner step -> push weights v+1 -> log. Async mode overlaps generation and training within
a staleness bound (arl/app/pipeline.py). Everything heavy lives behind `actors/`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import time
from collections.abc import Callable, Iterator

import numpy as np
import torch

from arl.actors.cluster import Cluster
from arl.actors.hosts import Host
from arl.actors.rollout_pool import RolloutBatch
from arl.app.pipeline import AsyncRollouts
from arl.app.run import Run, check_run_dir, run_dir
from arl.app.run_lock import RunLock
from arl.app.step_metrics import StepDone, step_metrics
from arl.app.stop import StopOnSignal, Stopped
from arl.config import Config, ConfigError, require_extras
from arl.credit import turn_advantages
from arl.dtypes import cpu_has_native_bf16
from arl.env_spec import resolve_env
from arl.errors import LearnerLost
from arl.gspo import group_advantages, informative_groups
from arl.metrics import Metrics
from arl.model.checkpoint.runs import step_in_name
from arl.model.source import local_folder
from arl.rollout.evaluation import read_positions
from arl.steps import start_states, transcripts_wanted
from arl.types import EpisodeSummary

__all__ = ["LearnerFailed", "NonFiniteError", "Stopped", "train"]
log = logging.getLogger(__name__)


class NonFiniteError(RuntimeError):
    """Too many optimizer steps in a row had a non-finite loss or gradient."""


class LearnerFailed(RuntimeError):
    """The learner died more often than `learner.checkpoint.max_restarts` allows."""


def train(cfg: Config, host: Host | None = None) -> Metrics:
    """Run `cfg.steps` GSPO steps (sync or async mode); return the last step's metrics.
    host: where the workers live (None: Ray, as `cfg.ray` says; `LocalHost()`: in this
    process, for one learner and no env actors).

    SIGTERM (`ray job stop`, `kill`) or Ctrl-C lets the current step finish, saves a
    checkpoint and raises `Stopped`; `resume=auto` continues from there. A learner actor that
    dies is rebuilt from the last checkpoint and the steps since are played again (up to
    `learner.checkpoint.max_restarts` times; then `LearnerFailed`).
    """
    # The first line of a run's (or a Ray job's) log says where its outputs go.
    print(f"arl train: run directory {run_dir(cfg)}", flush=True)
    print(f"arl train: {reproducibility(cfg)}", flush=True)
    for line in emulated_bf16(cfg):
        print(f"arl train: warning: {line}", flush=True)
    require_extras(cfg)  # before Ray starts: a missing extra is a config error
    with RunLock(run_dir(cfg)):  # one writer per run directory, before anything is written
        return _train(cfg, host)


def reproducibility(cfg: Config) -> str:
    """What makes two runs of `cfg` log the same metrics, in one line."""
    same = ("the same seed, machine (CPU instruction set), lock and thread counts give "
            "identical metrics")
    if cfg.rollout.engine == "vllm":
        same += ", up to vLLM's batching"
    if cfg.mode == "sync":
        return f"reproducible: sync mode; {same}"
    if cfg.deterministic:
        return (f"reproducible: async, deterministic (step k trains on the rollouts of "
                f"version k - {cfg.max_staleness}); {same}")
    return ("not reproducible: async batches take the chunks that finish first "
            "(deterministic=true makes them reproducible)")


def emulated_bf16(cfg: Config) -> list[str]:
    """One line per dtype key that forces bfloat16 on a CPU part of the run where this
    machine's CPU has no bf16 instructions (torch then emulates it, about ten times slower)."""
    if cpu_has_native_bf16():
        return []
    keys = []
    if cfg.model.dtype == "bfloat16" and cfg.rollout.gpus_per_worker == 0:
        keys.append("model.dtype")
    if cfg.learner.compute.dtype == "bfloat16" and cfg.learner.resources.gpus == 0:
        keys.append("learner.compute.dtype")
    return [f"{key}=bfloat16 on a CPU without bf16 instructions: torch emulates it, about "
            f"ten times slower than float32 (auto picks float32 here)" for key in keys]


def _train(cfg: Config, host: Host | None) -> Metrics:
    """`train` with the run directory's lock held."""
    check_run_dir(cfg)
    # A GGUF model or another run's checkpoint becomes, once, a cached HF directory that
    # every worker loads.
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(
        cfg.model, path=local_folder(cfg.model.path)))
    positions = _read_positions(cfg)
    # Signals first: a Ctrl-C while the workers start is a request to stop, not an exception
    # inside Ray's start-up.
    with Run(cfg) as run, StopOnSignal() as stop, Cluster(cfg, host) as cluster:
        stop.install()
        resumed = cluster.load_checkpoint(run.resume_from) if run.resume_from else {}
        run.open_sinks(wandb_run_id=resumed.get("wandb_run_id"))
        cluster.push_weights(version=run.start_step)
        start, restarts, metrics = run.start_step, 0, {}
        while True:
            try:
                if restarts:
                    start = _restart_learner(run, cluster)
                metrics = _train_steps(cfg, run, cluster, stop, positions, start, restarts)
                break
            except LearnerLost as err:
                restarts += 1
                _check_restarts(run, restarts, err)
        if not run.has_checkpoint(cfg.steps):
            _save_checkpoint(run, cluster, cfg.steps)
    return metrics


def _train_steps(cfg: Config, run: Run, cluster: Cluster, stop: StopOnSignal,
                 positions: dict[str, list[dict]], start: int, restarts: int) -> Metrics:
    """Steps `start`.. to the end: train, checkpoint, evaluate, log; the last metrics."""
    metrics: Metrics = {}
    steps = _sync_steps if cfg.mode == "sync" else _async_steps
    if stop.requested:  # while the workers started: stop before the first step
        _checkpoint_and_raise(run, cluster, start, functools.partial(
            Stopped, signum=stop.signum), f"stopped by {stop.name} before step {start + 1}")
    for step, done in steps(cfg, cluster, start):
        t_end = time.perf_counter()
        if cfg.learner.checkpoint.every and (step + 1) % cfg.learner.checkpoint.every == 0:
            _save_checkpoint(run, cluster, step + 1)
        metrics = step_metrics(cfg, done, t_end, cluster.actor_restarts)
        metrics["learner/restarts"] = float(restarts)
        if cfg.eval.every and ((step + 1) % cfg.eval.every == 0 or step + 1 == cfg.steps):
            t_eval = time.perf_counter()
            metrics.update(cluster.evaluate(positions, seed=cfg.seed + 10**6 + step))
            metrics["timing/eval"] = time.perf_counter() - t_eval
        run.log_samples(step, done.batch.summaries)
        run.log(step, metrics)
        if metrics["learner/skipped_in_row"] >= cfg.learner.optim.max_nonfinite_in_row:
            _checkpoint_and_raise(run, cluster, step + 1, NonFiniteError, (
                f"{cfg.learner.optim.max_nonfinite_in_row} optimizer steps in a row had a "
                "non-finite loss or gradient (learner.optim.max_nonfinite_in_row); none was "
                f"applied (check the rewards and the learning rate); stopped after step "
                f"{step + 1}"))
        if stop.requested:
            _checkpoint_and_raise(run, cluster, step + 1, functools.partial(
                Stopped, signum=stop.signum), f"stopped by {stop.name} after step {step + 1}")
    return metrics


def _check_restarts(run: Run, restarts: int, err: LearnerLost) -> None:
    """Raise `LearnerFailed` once the learner has died more than `learner.checkpoint.max_restarts`
    times; else say that it is rebuilt."""
    limit, last = run.cfg.learner.checkpoint.max_restarts, run.last_checkpoint()
    if restarts > limit:
        where = (f"resume=auto continues from {last}" if last is not None
                 else "no checkpoint was written; the run must start over")
        raise LearnerFailed(f"{err}; the learner died {restarts} times "
                            f"(learner.checkpoint.max_restarts={limit}), the run stops; "
                            f"{where}") from err
    log.warning("%s; rebuilding the learner from %s (restart %d of %d)", err,
                last or "the initial model", restarts, limit)


def _restart_learner(run: Run, cluster: Cluster) -> int:
    """A new learner group restored from the run's last complete checkpoint, the rollout
    workers given its weights, and the sinks rewound to it; returns its step (the replay
    starts there: sync mode plays exactly the steps it lost again)."""
    last = run.last_checkpoint()
    step = step_in_name(last) if last is not None else 0
    cluster.restart_learner(last)
    run.rewind(step)
    cluster.push_weights(version=step)
    return step


def _read_positions(cfg: Config) -> dict[str, list[dict]]:
    """The positions files evaluation scores, by file name (read once, by the driver, and
    every row checked by the env before Ray starts)."""
    if not cfg.eval.every:
        return {}
    spec, files = resolve_env(cfg.env.name), {}
    for path in cfg.eval.positions:
        try:
            rows = read_positions(path, functools.partial(spec.position, cfg.env))
        except ValueError as err:
            raise ConfigError("eval.positions", str(err)) from None
        files[os.path.splitext(os.path.basename(path))[0]] = rows
    return files


def _sync_steps(cfg: Config, cluster: Cluster, start: int) -> Iterator[tuple[int, StepDone]]:
    """Sync mode, as in the GSPO paper: collect with weights v, train, push v + 1."""
    for step in range(start, cfg.steps):
        t0 = time.perf_counter()
        batch, rounds = _collect(cfg, cluster, step)
        t1 = time.perf_counter()
        advantages, keep = _advantages(cfg, batch.summaries)
        if cfg.rollout.dynamic_sampling:
            keep &= _first_informative(cfg, batch.summaries, keep)
        learner_metrics = cluster.learner_step(batch, advantages, keep)
        t2 = time.perf_counter()
        cluster.push_weights(version=step + 1)
        t3 = time.perf_counter()
        yield step, StepDone(batch, keep, learner_metrics, (t0, t1, t2, t3),
                             staleness=[0] * len(batch.summaries), rollout_idle=t3 - t1,
                             resample_rounds=rounds)


def _collect(cfg: Config, cluster: Cluster, step: int) -> tuple[RolloutBatch, int]:
    """The step's batch, and how many extra engine calls it took: one round of
    `groups_per_step` start states (with `oversample_groups`, plus the first extra round's
    first k, in the same call), then (dynamic sampling) more rounds of fresh ones until that
    many groups have rewards that differ, or `max_resample_rounds` ran out."""
    r = cfg.rollout
    batch, rounds = None, 0
    while True:
        states = start_states(cfg, step, rounds)
        # Round r samples with seeds no other step's or round's calls use.
        seed = cfg.seed + step + rounds * (cfg.steps + 1)
        if batch is None and r.oversample_groups:
            states = states.extended(start_states(cfg, step, 1), r.oversample_groups)
            rounds = 1  # the first extra round's ids are taken: the next call plays round 2
        played = cluster.collect(states.env_seeds, states.group_ids, seed=seed,
                                 transcripts=transcripts_wanted(cfg, step) if batch is None else 0)
        batch = played if batch is None else batch + played
        extra_calls = rounds - 1 if r.oversample_groups else rounds
        if not r.dynamic_sampling or rounds >= r.max_resample_rounds:
            return batch, extra_calls
        rewards = torch.tensor([s.reward for s in batch.summaries]).view(-1, r.group_size)
        if int(informative_groups(rewards).sum()) >= r.groups_per_step:
            return batch, extra_calls
        rounds += 1


def _first_informative(cfg: Config, summaries: list[EpisodeSummary],
                       keep: np.ndarray) -> np.ndarray:
    """[B] mask of the first `groups_per_step` groups (in play order) that are kept and have
    rewards that differ: what dynamic sampling trains on."""
    size = cfg.rollout.group_size
    rewards = torch.tensor([s.reward for s in summaries]).view(-1, size)
    good = informative_groups(rewards).numpy() & keep.reshape(-1, size).all(axis=1)
    chosen = good & (np.cumsum(good) <= cfg.rollout.groups_per_step)
    return np.repeat(chosen, size)


def _async_steps(cfg: Config, cluster: Cluster, start: int) -> Iterator[tuple[int, StepDone]]:
    """Async mode (arl/app/pipeline.py): workers keep generating within `max_staleness`
    versions while the learner trains; weights are published without stopping them."""
    source = AsyncRollouts(cluster, cfg, start)
    try:
        for step in range(start, cfg.steps):
            t0 = time.perf_counter()
            batch, stats = source.next_batch(step)
            t1 = time.perf_counter()
            advantages, keep = _advantages(cfg, batch.summaries)
            learner_metrics = source.wait_for(cluster.start_step(batch, advantages, keep), step)
            t2 = time.perf_counter()
            cluster.publish_weights(version=step + 1)
            t3 = time.perf_counter()
            yield step, StepDone(batch, keep, learner_metrics, (t0, t1, t2, t3),
                                 stats.staleness, stats.dropped_trajectories,
                                 source.take_rollout_idle())
    finally:
        source.drain()


def _advantages(cfg: Config, summaries: list[EpisodeSummary]) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, keep [B]): group-relative advantages, and a mask that drops every group
    with a failed episode (an env raised: its reward says nothing about the policy).
    Advantages are [B] floats, or with `learner.advantage.level: turn` an object array of one
    array of turn advantages per episode (arl/credit.py)."""
    size, adv = cfg.rollout.group_size, cfg.learner.advantage
    keep = ~np.array([s.failure is not None for s in summaries]).reshape(-1, size).any(axis=1)
    if adv.level == "turn":
        per_turn = turn_advantages([[t.reward for t in s.turns] for s in summaries],
                                   [[t.state for t in s.turns] for s in summaries], size,
                                   adv.step_weight, adv.eps, adv.turn_discount,
                                   adv.step_group_scope, adv.scale)
        out = np.empty(len(per_turn), dtype=object)
        for i, adv in enumerate(per_turn):
            out[i] = adv * 0.0 if not keep[i // size] else adv
        return out, np.repeat(keep, size)
    rewards = torch.tensor([s.reward for s in summaries], dtype=torch.float32).view(-1, size)
    advantages = group_advantages(rewards, adv.eps, adv.scale)
    advantages[~torch.from_numpy(keep)] = 0.0
    return advantages.flatten().numpy(), np.repeat(keep, size)


def _save_checkpoint(run: Run, cluster: Cluster, steps_done: int) -> None:
    """The learner's checkpoint after `steps_done` steps, with the wandb run id to resume;
    then only the newest `learner.checkpoint.keep` are kept."""
    cluster.save_checkpoint(run.checkpoint_dir(steps_done), steps_done,
                            {"wandb_run_id": run.wandb_run_id})
    run.prune_checkpoints(run.cfg.learner.checkpoint.keep)


def _checkpoint_and_raise(run: Run, cluster: Cluster, steps_done: int,
                          error: Callable[[str], Exception], message: str) -> None:
    """Save a checkpoint after `steps_done` steps (unless checkpoint_every just did), then
    raise `error`: the run stops, and resume=auto continues from that checkpoint."""
    if not run.has_checkpoint(steps_done):
        _save_checkpoint(run, cluster, steps_done)
    path = run.checkpoint_dir(steps_done)
    raise error(f"{message}; checkpoint saved at {path} (resume=auto continues from it)")
