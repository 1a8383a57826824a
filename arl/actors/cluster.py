"""The training loop's view of the cluster: one handle over the rollout pool, the learner
group and the weight sync, which hides Ray from the driver.

It connects (or runs in-process), places the actors, ships the model folder to nodes that do
not see it, and cleans up on exit: an embedded Ray cluster it started is shut down again.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from arl.actors import connect, placement
from arl.actors.learner_group import LearnerGroup
from arl.actors.model_files import cluster_nodes, ship
from arl.actors.rollout_pool import RolloutBatch, RolloutPool
from arl.actors.weight_sync import WeightSync, make_weight_sync
from arl.config import Config


class Cluster:
    """Rollout and learner actors for one run (a context manager that cleans up)."""

    def __init__(self, cfg: Config, use_ray: bool = True):
        self.cfg = cfg
        self.use_ray = use_ray
        self.how = "in-process"
        self.learner: LearnerGroup | None = None
        self.rollout: RolloutPool | None = None
        self.sync: WeightSync | None = None
        self._group: Any = None  # the placement group, if any
        self._learner_at: list | None = None  # learner placement (for a rebuild)
        self._shipped: Any = None  # the model folder shipped to other nodes, if it was
        self._generation = 0  # learner groups built before the current one

    def __enter__(self) -> Cluster:
        """Connect and start the actors. If anything fails here, an embedded cluster this
        call started is shut down again before the error propagates."""
        try:
            self._start(self.cfg)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _start(self, cfg: Config) -> None:
        if not self.use_ray and cfg.learner.resources.num_workers > 1:
            raise ValueError("learner.resources.num_workers > 1 needs Ray (use_ray=True)")
        if not self.use_ray and cfg.weight_sync.transport != "object_store":
            raise ValueError("weight_sync.transport nccl | gloo needs Ray (use_ray=True)")
        learner_at = rollout_at = shipped = None
        if self.use_ray:
            self.how = connect.connect(cfg.ray)
            placement.require_resources(cfg)
            self._group, learner_at, rollout_at = placement.actor_placement(cfg)
            # Nodes that do not see the driver's model folder get it through the object store.
            shipped = ship(cfg.model.path) if cluster_nodes() > 1 else None
        self._learner_at, self._shipped = learner_at, shipped
        self.learner = LearnerGroup(cfg, self.use_ray, learner_at, shipped)
        self.rollout = RolloutPool(cfg, self.use_ray, rollout_at, shipped)
        self._connect_sync()

    def _connect_sync(self) -> None:
        self.sync = make_weight_sync(self.cfg, self.learner, self.rollout.group)
        self.rollout.restore = self.sync.restore
        # A failed weight load may be the learner's death, not the worker's: ask first.
        self.rollout.check_source = self.learner.probe

    def restart_learner(self, checkpoint: str | None) -> None:
        """Replace the whole learner group (a rank died: collectives cannot go on without
        it) by a new one in the same places, restored from `checkpoint` (None: the
        initial model), with a new weight sync. Push weights afterwards."""
        self.learner.close()
        self._generation += 1
        self.learner = LearnerGroup(self.cfg, self.use_ray, self._learner_at, self._shipped,
                                    self._generation)
        self._connect_sync()
        if checkpoint is not None:
            self.learner.load_checkpoint(checkpoint)

    @property
    def actor_restarts(self) -> int:
        return self.rollout.actor_restarts

    def collect(self, env_seeds: list[int], group_ids: list[int], seed: int,
                transcripts: int = 0) -> RolloutBatch:
        """One step's groups, played by every rollout worker (RolloutPool.collect)."""
        return self.rollout.collect(env_seeds, group_ids, seed, transcripts)

    def learner_step(self, batch: RolloutBatch, advantages: np.ndarray,
                     keep: np.ndarray) -> dict[str, Any]:
        """One learner step on the batch's trajectories where `keep` is true."""
        return self.learner.get(self.submit_learner_step(batch, advantages, keep))[0]

    def submit_learner_step(self, batch: RolloutBatch, advantages: np.ndarray,
                            keep: np.ndarray) -> list[Any]:
        """Start `learner_step`; return every rank's reference (rank 0's: the metrics)."""
        return self.learner.submit_step(advantages, keep, batch.trajectory_refs)

    def publish_weights(self, version: int) -> list[Any]:
        """Send the learner's weights as `version` and queue a load on every rollout worker
        without waiting; return the loads' references."""
        self.rollout.version = version
        return self.sync.publish(version)

    def push_weights(self, version: int) -> None:
        """`publish_weights`, then wait until every rollout worker has loaded them."""
        self.rollout.wait_loads(self.publish_weights(version))
        self.sync.finish()

    def evaluate(self, positions: dict[str, list[dict]], seed: int) -> dict[str, float]:
        """`eval/*` metrics of the current weights, played by rollout worker 0."""
        e = self.cfg.eval
        return self.rollout.group.get(self.rollout.group.submit_one(
            0, "evaluate", (list(e.opponents), positions, e.games, seed)))

    def load_checkpoint(self, directory: str) -> dict[str, Any]:
        """Restore the learner from `directory`; return the `extra` JSON that
        `save_checkpoint` stored. Push weights afterwards to bring the rollout workers to
        the same version."""
        return self.learner.load_checkpoint(directory)

    def save_checkpoint(self, directory: str, step: int, extra: dict[str, Any]) -> None:
        """Checkpoint the learner after `step` steps, with the run config and `extra` (JSON)."""
        self.learner.save_checkpoint(directory, step, extra)

    def __exit__(self, *exc: object) -> None:
        for part in (self.rollout, self.learner):
            if part is not None:
                part.close()
        placement.unplace(self._group)
        if self.use_ray and self.how == "embedded":
            connect.shutdown()
