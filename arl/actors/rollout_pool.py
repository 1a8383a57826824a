"""The rollout side of the cluster: W rollout workers playing a step's groups, and what
happens when one dies or hangs.

A failure is handled in one place (`recover`): a dead worker is rebuilt by Ray (up to
`rollout.max_restarts`), a hung one (slower than `rollout.timeout_s`) is killed and rebuilt;
either way it is given the current weights again and its pid is noted, so a changed process
counts as a restart. The lost call's results are never fetched, so nothing is consumed twice.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import ray

from arl.actors.env_runner import ENV_GROUP, EnvRunner
from arl.actors.group import ActorGroup, until_rebuilt
from arl.actors.hosts import Host, Placement
from arl.actors.rollout import RolloutActor
from arl.config import Config
from arl.errors import RolloutWorkerLost
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


@dataclass
class RolloutCall:
    """One worker's collect in flight: its arguments and [summaries, trajectories] refs."""

    worker: int
    args: tuple
    refs: list[Any]

    @property
    def trajectories(self) -> Any:
        """The reference to the call's trajectories (a list of Trajectory)."""
        return self.refs[1]


class WeightSource(Protocol):
    """What the pool needs of the learner's side when a worker comes back: the version every
    worker is meant to hold, a load of it queued on one worker (its reference), and a check
    that raises `LearnerLost` if the learner itself died."""

    @property
    def weights_version(self) -> int: ...

    def restore_weights(self, worker: int) -> Any: ...

    def probe_learner(self) -> None: ...


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
    """The rollout workers of one run. `source` gives a rebuilt worker its weights."""

    def __init__(self, cfg: Config, host: Host, placement: Placement, source: WeightSource):
        self.cfg, self.source = cfg, source
        r, workers = cfg.rollout, cfg.rollout.num_workers
        self.runners = _env_runners(cfg, host, placement)
        handles = self.runners.members if self.runners is not None else []
        self.group = ActorGroup(
            RolloutActor,
            [(cfg.model, r, cfg.env, r.cpus_per_worker, placement.shipped,
              handles[w * r.env_actors:(w + 1) * r.env_actors]) for w in range(workers)],
            num_cpus=r.cpus_per_worker, num_gpus=r.gpus_per_worker,
            resources=r.resources, host=host, name=f"{cfg.run_name}-rollout",
            max_restarts=r.max_restarts, scheduling=placement.rollout,
            concurrency_groups={ENV_GROUP: r.env_actors + 1} if r.env_actors else None,
        )
        self.actor_restarts = 0  # workers rebuilt (new processes), whole run
        self._pids: list[int | None] = [None] * len(self.group)
        self.timeout = cfg.rollout.timeout_s or None

    def __len__(self) -> int:
        return len(self.group)

    def wait_loaded(self) -> None:
        """Return when every worker has loaded its engine (raises what a load raised)."""
        self.group.get(self.group.submit("loaded", [()] * len(self.group)))

    def collect(self, env_seeds: list[int], group_ids: list[int], seed: int,
                transcripts: int = 0) -> RolloutBatch:
        """Every worker plays its share of the groups; only summaries come to the driver.
        The first `transcripts` groups each bring one decoded conversation. A worker that
        fails is recovered and plays the same share again (same seeds: same episodes)."""
        shares = worker_shares(env_seeds, group_ids, seed, len(self), transcripts)
        calls = [self.start(w, args) for w, args in enumerate(shares)]
        summaries, trajectory_refs = [], []
        for call in calls:
            summaries += self.fetch(call)
            trajectory_refs.append(call.trajectories)
        return RolloutBatch(summaries, trajectory_refs)

    def start(self, w: int, args: tuple) -> RolloutCall:
        """Start a collect of `args` on worker `w`."""
        return RolloutCall(w, args, self.group.submit_one(w, "collect", args, num_returns=2))

    def result(self, call: RolloutCall) -> list[EpisodeSummary]:
        """The call's summaries; `RolloutWorkerLost` (after recovering the worker) if it died."""
        try:
            return self.group.get(call.refs[0])
        except ray.exceptions.RayActorError as err:
            self.recover(call.worker, f"died ({type(err).__name__})")
            raise RolloutWorkerLost(f"rollout worker {call.worker} died") from err

    def fetch(self, call: RolloutCall) -> list[EpisodeSummary]:
        """The summaries of `call`, redone on a recovered worker (updating `call.refs`) if
        it failed or came back restarted (with weights older than the current version)."""
        for _ in range(self._max_attempts()):
            try:
                part = self.group.get(call.refs[0], timeout=self.timeout)
                if all(s.policy_version == self.source.weights_version for s in part):
                    return part
                self.recover(call.worker, "was restarted with old weights")
            except ray.exceptions.RayError as err:
                self.failed(call.worker, err, "collect")
            call.refs = self.start(call.worker, call.args).refs
        raise RuntimeError(f"rollout worker {call.worker} kept failing; "
                           "rollout.max_restarts exceeded")

    def evaluate(self, opponents: list[str], positions: dict[str, list[dict]], games: int,
                 seed: int) -> dict[str, float]:
        """`eval/*` metrics of the current weights, played by worker 0."""
        return self.group.get(self.group.submit_one(
            0, "evaluate", (opponents, positions, games, seed)))

    def wait_loads(self, loads: list[Any]) -> None:
        """Wait until every worker has loaded the weights it was sent; a worker that failed
        meanwhile is recovered (and gets them through the object store)."""
        for w, load in enumerate(loads):
            try:
                self._note_pid(w, self.group.get(load, timeout=self.timeout))
            except ray.exceptions.RayError as err:
                self.source.probe_learner()
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
        log.warning("rollout worker %d %s; it gets version %d again", w, why,
                    self.source.weights_version)
        # A dead-for-good worker may have died of its weights' source: ask that first.
        pid = until_rebuilt(lambda: self.group.get(self.source.restore_weights(w)),
                            f"rollout worker {w}", REBUILD_WAIT_S,
                            on_dead=self.source.probe_learner)
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


def _env_runners(cfg: Config, host: Host, placement: Placement) -> ActorGroup | None:
    """`rollout.env_actors` env runners for each rollout worker (arl/actors/env_runner.py),
    named `<run>-env-<i>`, rebuilt by Ray like the workers; None without any."""
    r = cfg.rollout
    if not r.env_actors:
        return None
    return ActorGroup(EnvRunner, [(cfg.model, r, cfg.env, r.cpus_per_env_actor,
                                   placement.shipped)] * (r.num_workers * r.env_actors),
                      num_cpus=r.cpus_per_env_actor, host=host, name=f"{cfg.run_name}-env",
                      max_restarts=r.max_restarts)
