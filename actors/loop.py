"""The training loop's view of the cluster: rollout workers, the learner and weight sync.

`Cluster` hides Ray from the driver: it connects (or runs in-process), places the actors,
moves trajectories by reference from rollout workers to the learner, and publishes weights
with one object-store put per version that every rollout worker maps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from actors import cluster as ray_cluster
from actors.group import ActorGroup
from actors.learner import LearnerWorker
from actors.rollout import RolloutWorker
from arl.config import Config, to_dict
from arl.types import EpisodeSummary


@dataclass(frozen=True)
class RolloutBatch:
    """One step's episodes: summaries on the driver, trajectories still in the object store."""

    summaries: list[EpisodeSummary]
    trajectory_refs: list[Any]  # one per rollout worker; lists of Trajectory

    @property
    def sampled_tokens(self) -> int:
        return sum(s.response_len for s in self.summaries)


class Cluster:
    """Rollout and learner actors for one run (a context manager that cleans up)."""

    def __init__(self, cfg: Config, use_ray: bool = True):
        self.cfg = cfg
        self.use_ray = use_ray

    def __enter__(self) -> Cluster:
        cfg = self.cfg
        if self.use_ray:
            self.how = ray_cluster.connect(cfg.ray)
        self.learner = ActorGroup(
            LearnerWorker,
            [(cfg.model, cfg.learner, cfg.steps, cfg.seed, cfg.rollout.temperature,
              cfg.learner.cpus)],
            num_cpus=cfg.learner.cpus,
            use_ray=self.use_ray,
            name=f"{cfg.run_name}-learner",
        )
        self.rollout = ActorGroup(
            RolloutWorker,
            [(cfg.model, cfg.rollout, cfg.env, cfg.rollout.cpus_per_worker)]
            * cfg.rollout.num_workers,
            num_cpus=cfg.rollout.cpus_per_worker,
            use_ray=self.use_ray,
            name=f"{cfg.run_name}-rollout",
        )
        return self

    def collect(self, env_seeds: list[int], group_ids: list[int], seed: int) -> RolloutBatch:
        """Every worker plays its share of the groups; only summaries come to the driver."""
        parts = np.array_split(np.arange(len(env_seeds)), len(self.rollout))
        args = [
            ([env_seeds[i] for i in part], [group_ids[i] for i in part], seed * 1009 + w)
            for w, part in enumerate(parts)
        ]
        refs = self.rollout.submit("collect", args, num_returns=2)
        summaries = [s for ref in refs for s in self.rollout.get(ref[0])]
        return RolloutBatch(summaries, [ref[1] for ref in refs])

    def learner_step(self, batch: RolloutBatch, advantages: np.ndarray,
                     keep: np.ndarray) -> dict[str, float]:
        """One learner step on the batch's trajectories where `keep` is true."""
        refs = self.learner.submit("step", [(advantages, keep, *batch.trajectory_refs)])
        return self.learner.get(refs)[0]

    def push_weights(self, version: int) -> None:
        """One export, one put, one load call per rollout worker."""
        weights = self.learner.submit("export_weights", [()])[0]
        loads = self.rollout.submit("update_weights", [(weights, version)] * len(self.rollout))
        self.rollout.get(loads)

    def load_checkpoint(self, directory: str) -> int:
        """Restore the learner from `directory`; return the checkpoint's step. Push weights
        afterwards to bring the rollout workers to the same version."""
        return self.learner.get(self.learner.submit("load_checkpoint", [(directory,)]))[0]

    def save_checkpoint(self, directory: str, step: int) -> None:
        extra = {"config": to_dict(self.cfg)}
        self.learner.get(self.learner.submit("save_checkpoint", [(directory, step, extra)]))

    def __exit__(self, *exc: object) -> None:
        self.rollout.close()
        self.learner.close()
        if self.use_ray and self.how == "embedded":
            ray_cluster.shutdown()
