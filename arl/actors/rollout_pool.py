"""The rollout side of the cluster: W rollout workers playing a step's groups, and what
happens when one dies or hangs.

A failure is handled in one place (`recover`): a dead worker is rebuilt by Ray (up to
`rollout.max_restarts`), a hung one (slower than `rollout.timeout_s`) is killed and rebuilt;
either way it is given the current weights again and its pid is noted, so a changed process
counts as a restart. The lost call's results are never fetched, so nothing is consumed twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from arl.actors.env_runner import ENV_GROUP, EnvRunner
from arl.actors.group import ActorGroup, until_rebuilt
from arl.actors.model_files import ShippedModel
from arl.actors.rollout import RolloutActor
from arl.config import Config
from arl.types import EpisodeSummary

log = logging.getLogger(__name__)
REBUILD_WAIT_S = 300.0  # how long a rebuilt rollout worker may take to come back


@dataclass(frozen=True)
class RolloutBatch:
    """One step's episodes: summaries on the driver, trajectories still in the object store."""

    summaries: list[EpisodeSummary]
    trajectory_refs: list[Any]  # one per collect call; lists of Trajectory

    @property
    def sampled_tokens(self) -> int:
        return sum(s.response_len for s in self.summaries)

    def __add__(self, other: RolloutBatch) -> RolloutBatch:
        """Both batches' episodes, this one's first."""
        return RolloutBatch(self.summaries + other.summaries,
                            self.trajectory_refs + other.trajectory_refs)


def worker_shares(env_seeds: list[int], group_ids: list[int], seed: int, workers: int,
                  transcripts: int) -> list[tuple]:
    """`collect` arguments for each of `workers` workers playing one step's groups: a
    contiguous share of the groups, its own sampling seed, and how many of the step's first
    `transcripts` groups fall in its share. Sync mode and async chunks both cut steps so."""
    parts = np.array_split(np.arange(len(env_seeds)), workers)
    wanted = np.clip(transcripts - np.cumsum([0, *map(len, parts[:-1])]), 0,
                     [len(p) for p in parts])
    return [([env_seeds[i] for i in part], [group_ids[i] for i in part], seed * 1009 + w,
             int(wanted[w])) for w, part in enumerate(parts)]


class RolloutPool:
    """The rollout workers of one run. `restore(w)` (given by the weight sync) queues the
    current weights on worker `w` and returns the load's reference."""

    def __init__(self, cfg: Config, use_ray: bool, scheduling: list | None,
                 shipped: ShippedModel | None):
        self.cfg = cfg
        r, workers = cfg.rollout, cfg.rollout.num_workers
        self.runners = _env_runners(cfg, use_ray, shipped)
        handles = self.runners.members if self.runners is not None else []
        self.group = ActorGroup(
            RolloutActor,
            [(cfg.model, r, cfg.env, r.cpus_per_worker, shipped,
              handles[w * r.env_actors:(w + 1) * r.env_actors]) for w in range(workers)],
            num_cpus=r.cpus_per_worker, num_gpus=r.gpus_per_worker,
            resources=r.resources, use_ray=use_ray, name=f"{cfg.run_name}-rollout",
            max_restarts=r.max_restarts, scheduling=scheduling,
            concurrency_groups={ENV_GROUP: r.env_actors + 1} if r.env_actors else None,
        )
        self.restore: Callable[[int], Any] = lambda w: None
        # Raises if the weights' source (the learner) died: then a failed load is not the
        # worker's fault and rebuilding the worker would not help.
        self.check_source: Callable[[], None] = lambda: None
        self.version = 0  # the weights every worker is meant to hold
        self.actor_restarts = 0  # workers rebuilt (new processes), whole run
        self._pids: list[int | None] = [None] * len(self.group)
        self.timeout = cfg.rollout.timeout_s or None

    def __len__(self) -> int:
        return len(self.group)

    def collect(self, env_seeds: list[int], group_ids: list[int], seed: int,
                transcripts: int = 0) -> RolloutBatch:
        """Every worker plays its share of the groups; only summaries come to the driver.
        The first `transcripts` groups each bring one decoded conversation. A worker that
        fails is recovered and plays the same share again (same seeds: same episodes)."""
        shares = worker_shares(env_seeds, group_ids, seed, len(self), transcripts)
        refs = [self.submit(w, args) for w, args in enumerate(shares)]
        summaries, trajectory_refs = [], []
        for w, ref in enumerate(refs):
            part, ref = self.fetch(w, ref, shares[w])
            summaries += part
            trajectory_refs.append(ref[1])
        return RolloutBatch(summaries, trajectory_refs)

    def submit(self, w: int, args: tuple) -> list[Any]:
        """Start a collect of `args` on worker `w`: [summaries ref, trajectories ref]."""
        return self.group.submit_one(w, "collect", args, num_returns=2)

    def fetch(self, w: int, ref: list[Any], args: tuple) -> tuple[list[EpisodeSummary], list]:
        """(summaries, refs) of worker `w`'s collect, redone on a recovered worker if it
        failed or came back restarted (with weights older than the current version)."""
        for _ in range(self._max_attempts()):
            try:
                part = self.group.get(ref[0], timeout=self.timeout)
                if all(s.policy_version == self.version for s in part):
                    return part, ref
                self.recover(w, "was restarted with old weights")
            except ray.exceptions.RayError as err:
                self.failed(w, err, "collect")
            ref = self.submit(w, args)
        raise RuntimeError(f"rollout worker {w} kept failing; rollout.max_restarts exceeded")

    def wait_loads(self, loads: list[Any]) -> None:
        """Wait until every worker has loaded the weights it was sent; a worker that failed
        meanwhile is recovered (and gets them through the object store)."""
        for w, load in enumerate(loads):
            try:
                self._note_pid(w, self.group.get(load, timeout=self.timeout))
            except ray.exceptions.RayError as err:
                self.check_source()
                self.failed(w, err, "weight load")

    def failed(self, w: int, err: Exception, doing: str) -> None:
        """The one failure handler: a hung worker is killed first, then any failed one is
        recovered. Errors that are not a worker's failure propagate."""
        if isinstance(err, ray.exceptions.GetTimeoutError):
            self.group.replace(w)
            self.recover(w, f"took over {self.timeout}s in a {doing} and was replaced")
        elif isinstance(err, ray.exceptions.RayActorError):
            self.recover(w, f"died during a {doing} ({type(err).__name__})")
        else:
            raise err

    def recover(self, w: int, why: str) -> None:
        """Give worker `w` the current weights once Ray has rebuilt it, and count it as
        restarted if its process changed."""
        log.warning("rollout worker %d %s; it gets version %d again", w, why, self.version)
        # A dead-for-good worker may have died of its weights' source: ask that first.
        pid = until_rebuilt(lambda: self.group.get(self.restore(w)), f"rollout worker {w}",
                            REBUILD_WAIT_S, on_dead=self.check_source)
        self._note_pid(w, pid)

    def _note_pid(self, w: int, pid: int | None) -> None:
        if pid is None:
            return
        if self._pids[w] is not None and self._pids[w] != pid:
            self.actor_restarts += 1
        self._pids[w] = pid

    def _max_attempts(self) -> int:
        limit = self.cfg.rollout.max_restarts
        return 1 + (limit if limit >= 0 else 10**9)

    def close(self) -> None:
        if self.runners is not None:  # first: a collect waiting on them then ends at once
            self.runners.close()
        self.group.close()


def _env_runners(cfg: Config, use_ray: bool, shipped: ShippedModel | None
                 ) -> ActorGroup | None:
    """`rollout.env_actors` env runners for each rollout worker (arl/actors/env_runner.py),
    named `<run>-env-<i>`, rebuilt by Ray like the workers; None without any."""
    r = cfg.rollout
    if not r.env_actors:
        return None
    if not use_ray:
        raise ValueError("rollout.env_actors > 0 needs Ray (use_ray=True)")
    return ActorGroup(EnvRunner, [(cfg.model, r, cfg.env, r.cpus_per_env_actor, shipped)]
                      * (r.num_workers * r.env_actors), num_cpus=r.cpus_per_env_actor,
                      use_ray=True, name=f"{cfg.run_name}-env", max_restarts=r.max_restarts)
