"""The training loop's view of the cluster: rollout workers, the learner and weight sync.

`Cluster` hides Ray from the driver: it connects (or runs in-process), places the actors,
moves trajectories by reference from rollout workers to the learner, and publishes weights
with one object-store put per version that every rollout worker maps.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from actors import cluster as ray_cluster
from actors.group import ActorGroup
from actors.learner import LearnerWorker
from actors.model_files import cluster_nodes, ship
from actors.rollout import RolloutWorker
from arl.config import Config, to_dict
from arl.types import EpisodeSummary

log = logging.getLogger(__name__)
REBUILD_WAIT_S = 300.0  # how long a rebuilt rollout worker may take to come back


@dataclass(frozen=True)
class RolloutBatch:
    """One step's episodes: summaries on the driver, trajectories still in the object store."""

    summaries: list[EpisodeSummary]
    trajectory_refs: list[Any]  # one per rollout worker; lists of Trajectory

    @property
    def sampled_tokens(self) -> int:
        return sum(s.response_len for s in self.summaries)


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


class Cluster:
    """Rollout and learner actors for one run (a context manager that cleans up)."""

    def __init__(self, cfg: Config, use_ray: bool = True):
        self.cfg = cfg
        self.use_ray = use_ray

    def __enter__(self) -> Cluster:
        """Connect and start the actors. If anything fails here, an embedded cluster this
        call started is shut down again before the error propagates."""
        cfg = self.cfg
        self.how = "in-process"
        self.learner = self.rollout = self._group = None
        try:
            self._start(cfg)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self, cfg: Config) -> None:
        if self.use_ray:
            self.how = ray_cluster.connect(cfg.ray)
            ray_cluster.require_resources(cfg)
            self._group, learner_at, rollout_at = ray_cluster.actor_placement(cfg)
        elif cfg.learner.num_workers > 1:
            raise ValueError("learner.num_workers > 1 needs Ray (use_ray=True)")
        else:
            learner_at = rollout_at = None
        # Nodes that do not see the driver's model folder get it through the object store.
        shipped = ship(cfg.model.path) if self.use_ray and cluster_nodes() > 1 else None
        self.learner = ActorGroup(
            LearnerWorker,
            [(cfg.model, cfg.learner, cfg.steps, cfg.seed, cfg.rollout.temperature,
              cfg.learner.cpus, shipped)] * cfg.learner.num_workers,
            num_cpus=cfg.learner.cpus,
            num_gpus=cfg.learner.gpus,
            resources=cfg.learner.resources,
            use_ray=self.use_ray,
            name=f"{cfg.run_name}-learner",
            scheduling=learner_at,
        )
        self.rollout = ActorGroup(
            RolloutWorker,
            [(cfg.model, cfg.rollout, cfg.env, cfg.rollout.cpus_per_worker, shipped)]
            * cfg.rollout.num_workers,
            num_cpus=cfg.rollout.cpus_per_worker,
            num_gpus=cfg.rollout.gpus_per_worker,
            resources=cfg.rollout.resources,
            use_ray=self.use_ray,
            name=f"{cfg.run_name}-rollout",
            max_restarts=cfg.rollout.max_restarts,
            scheduling=rollout_at,
        )
        if len(self.learner) > 1:  # one torch.distributed group; rank 0 hosts the rendezvous
            address, port = self.learner.get(self.learner.submit_one(0, "rendezvous", ()))
            world = len(self.learner)
            self.learner.get(self.learner.submit(
                "join_group", [(rank, world, address, port) for rank in range(world)]))
        self.actor_restarts = 0  # rollout workers rebuilt (new processes), whole run
        self._pids: list[int | None] = [None] * cfg.rollout.num_workers
        self._weights = None  # the current version in the object store, once exported
        self._version = 0
        self._collective = cfg.weight_sync.transport != "object_store"
        self._sync_formed = False  # the weight-sync group exists and has every member
        if self._collective and not self.use_ray:
            raise ValueError("weight_sync.transport nccl | gloo needs Ray (use_ray=True)")

    def collect(self, env_seeds: list[int], group_ids: list[int], seed: int,
                transcripts: int = 0) -> RolloutBatch:
        """Every worker plays its share of the groups; only summaries come to the driver.
        The first `transcripts` groups each bring one decoded conversation.

        A worker that dies (or, with `rollout.timeout_s`, hangs) is rebuilt by Ray, given the
        current weights, and asked for the same share again: same seeds, so the same
        episodes. The lost call's results are never fetched, so nothing is consumed twice.
        """
        args = worker_shares(env_seeds, group_ids, seed, len(self.rollout), transcripts)
        refs = self.rollout.submit("collect", args, num_returns=2)
        summaries, trajectory_refs = [], []
        for w, ref in enumerate(refs):
            part, ref = self._fetch(w, ref, args[w])
            summaries += part
            trajectory_refs.append(ref[1])
        return RolloutBatch(summaries, trajectory_refs)

    def _fetch(self, w: int, ref: Any, args: tuple) -> tuple[list[EpisodeSummary], Any]:
        """(summaries, refs) of worker `w`'s collect, redone on a rebuilt worker if it died,
        hung, or came back restarted (with weights older than the current version)."""
        timeout = self.cfg.rollout.timeout_s or None
        for _ in range(self._max_attempts()):
            try:
                part = self.rollout.get(ref[0], timeout=timeout)
                if all(s.policy_version == self._version for s in part):
                    return part, ref
                self._rebuilt(w, "was restarted with old weights")
            except ray.exceptions.GetTimeoutError:
                self.rollout.replace(w)
                self._rebuilt(w, f"took over {timeout}s and was replaced")
            except ray.exceptions.RayActorError as err:
                self._rebuilt(w, f"died ({type(err).__name__})")
            ref = self.rollout.submit_one(w, "collect", args, num_returns=2)
        raise RuntimeError(f"rollout worker {w} kept failing; rollout.max_restarts exceeded")

    def rebuild(self, w: int, why: str) -> None:
        """Bring rollout worker `w` back after a failure (see `_rebuilt`)."""
        self._rebuilt(w, why)

    def _rebuilt(self, w: int, why: str) -> None:
        """Give rollout worker `w` the current weights once Ray has rebuilt it, and count it
        as restarted if its process changed."""
        log.warning("rollout worker %d %s; it gets version %d again", w, why, self._version)
        deadline = time.monotonic() + REBUILD_WAIT_S
        self._sync_formed = False  # a rebuilt worker is in no group
        while True:
            load = self.rollout.submit_one(w, "update_weights", (self._exported(), self._version))
            try:
                self._note_pid(w, self.rollout.get(load))
                return
            except ray.exceptions.ActorDiedError as err:
                raise RuntimeError(f"rollout worker {w} is dead for good "
                                   "(rollout.max_restarts exceeded)") from err
            except ray.exceptions.RayActorError:  # still restarting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def _note_pid(self, w: int, pid: int | None) -> None:
        if pid is None:
            return
        if self._pids[w] is not None and self._pids[w] != pid:
            self.actor_restarts += 1
        self._pids[w] = pid

    def _max_attempts(self) -> int:
        limit = self.cfg.rollout.max_restarts
        return 1 + (limit if limit >= 0 else 10**9)

    def learner_step(self, batch: RolloutBatch, advantages: np.ndarray,
                     keep: np.ndarray) -> dict[str, Any]:
        """One learner step on the batch's trajectories where `keep` is true."""
        return self.learner.get(self.submit_learner_step(batch, advantages, keep))

    def submit_learner_step(self, batch: RolloutBatch, advantages: np.ndarray,
                            keep: np.ndarray) -> Any:
        """Start `learner_step`; return the reference to its metrics."""
        args = (advantages, keep, *batch.trajectory_refs)  # every rank reads the whole batch
        return self.learner.submit("step", [args] * len(self.learner))[0]

    def publish_weights(self, version: int) -> list[Any]:
        """Send the learner's weights as `version` and queue a load on every rollout worker
        without waiting: each loads them when its current call ends. Returns the loads'
        references. object_store: one export, one put, every worker maps it. nccl | gloo:
        one broadcast call on the learner and one receive call per worker."""
        self._version, self._weights, self._sends = version, None, []
        if self._collective:
            if not self._sync_formed:
                self._form_sync_group()
            self._sends = self.learner.submit("broadcast_weights", [()] * len(self.learner))
            return self.rollout.submit("receive_weights", [(version,)] * len(self.rollout))
        weights = self._exported()
        return self.rollout.submit("update_weights", [(weights, version)] * len(self.rollout))

    def _exported(self) -> Any:
        """The current weights in the object store (exported once per version): what the
        object_store transport sends, and what a rebuilt worker gets under any transport."""
        if self._weights is None:
            # Every rank joins (ZeRO-3 gathers); rank 0's copy is the one that travels.
            self._weights = self.learner.submit("export_weights", [()] * len(self.learner))[0]
        return self._weights

    def _form_sync_group(self) -> None:
        """Form a new weight-sync group of learner rank 0 and every rollout worker."""
        cfg, learner = self.cfg, self.learner
        layout = learner.get(learner.submit("weight_layout",
                                            [(cfg.model.dtype,)] * len(learner)))[0]
        address, port = learner.get(learner.submit_one(0, "rendezvous", ()))
        world = 1 + len(self.rollout)
        common = (cfg.weight_sync.transport, layout, int(cfg.weight_sync.bucket_mib * 2**20),
                  cfg.rollout.timeout_s or 600.0)
        joins = [learner.submit_one(0, "join_sync", (address, port, world, *common))]
        joins += self.rollout.submit("join_sync", [(address, port, w + 1, world, *common)
                                                   for w in range(len(self.rollout))])
        learner.get(joins)
        self._sync_formed = True

    def push_weights(self, version: int) -> None:
        """`publish_weights`, then wait until every rollout worker has loaded them. A worker
        that failed meanwhile is rebuilt and given the weights through the object store; a
        collective group that lost a member is formed anew at the next sync."""
        loads = self.publish_weights(version)
        timeout = self.cfg.rollout.timeout_s or None
        for w, load in enumerate(loads):
            try:
                self._note_pid(w, self.rollout.get(load, timeout=timeout))
            except ray.exceptions.GetTimeoutError:
                self.rollout.replace(w)
                self._rebuilt(w, f"took over {timeout}s to load weights and was replaced")
            except ray.exceptions.RayActorError:
                self._rebuilt(w, "died during a weight update")
        try:
            self.learner.get(self._sends)
        except ray.exceptions.RayError as err:  # a receiver vanished mid-broadcast
            log.warning("weight broadcast failed (%s); the group is formed anew", err)
            self._sync_formed = False

    def load_checkpoint(self, directory: str) -> dict[str, Any]:
        """Restore the learner from `directory`; return the `extra` JSON that
        `save_checkpoint` stored. Push weights afterwards to bring the rollout workers to
        the same version."""
        return self.learner.get(self.learner.submit(
            "load_checkpoint", [(directory,)] * len(self.learner)))[0]

    def save_checkpoint(self, directory: str, step: int, extra: dict[str, Any]) -> None:
        """Checkpoint the learner after `step` steps, with the run config and `extra` (JSON)."""
        extra = {"config": to_dict(self.cfg), **extra}
        self.learner.get(self.learner.submit(
            "save_checkpoint", [(directory, step, extra)] * len(self.learner)))  # rank 0 writes

    def __exit__(self, *exc: object) -> None:
        for group in (self.rollout, self.learner):
            if group is not None:
                group.close()
        ray_cluster.unplace(self._group)
        if self.use_ray and self.how == "embedded":
            ray_cluster.shutdown()
