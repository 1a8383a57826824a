"""The learner side of the cluster: M learner actors, in one data-parallel group when M > 1.

Every call goes to every rank (DeepSpeed gathers need them all); rank 0's result is the one
that counts (it exports weights and writes checkpoints).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from actors.group import ActorGroup
from actors.learner import LearnerWorker
from actors.model_files import ShippedModel
from actors.transport import Layout
from arl.config import Config, to_dict


class LearnerGroup:
    """The learner actors of one run."""

    def __init__(self, cfg: Config, use_ray: bool, scheduling: list | None,
                 shipped: ShippedModel | None):
        self.cfg = cfg
        self.group = ActorGroup(
            LearnerWorker,
            [(cfg.model, cfg.learner, cfg.steps, cfg.seed, cfg.rollout.temperature,
              cfg.learner.cpus, shipped)] * cfg.learner.num_workers,
            num_cpus=cfg.learner.cpus, num_gpus=cfg.learner.gpus,
            resources=cfg.learner.resources, use_ray=use_ray, name=f"{cfg.run_name}-learner",
            scheduling=scheduling,
        )
        if len(self.group) > 1:  # one torch.distributed group; rank 0 hosts the rendezvous
            address, port = self.rendezvous()
            world = len(self.group)
            self.get(self.group.submit(
                "join_group", [(rank, world, address, port) for rank in range(world)]))

    def __len__(self) -> int:
        return len(self.group)

    def _all(self, method: str, *args: Any) -> list[Any]:
        return self.group.submit(method, [args] * len(self.group))

    def get(self, refs: Any, timeout: float | None = None) -> Any:
        return self.group.get(refs, timeout)

    def submit_step(self, advantages: np.ndarray, keep: np.ndarray,
                    trajectory_refs: list[Any]) -> Any:
        """Start one learner step (every rank reads the whole batch from the object store);
        return the reference to rank 0's metrics."""
        return self._all("step", advantages, keep, *trajectory_refs)[0]

    def export(self) -> Any:
        """The reference to the full current weights (rank 0's export; all ranks join)."""
        return self._all("export_weights")[0]

    def weight_layout(self, dtype: str) -> Layout:
        return self.get(self._all("weight_layout", dtype))[0]

    def rendezvous(self) -> tuple[str, int]:
        """(address, free port) on rank 0's node."""
        return self.get(self.group.submit_one(0, "rendezvous", ()))

    def join_sync(self, *args: Any) -> Any:
        """Rank 0 joins a weight-sync group (actors/transport.py); returns the call's ref."""
        return self.group.submit_one(0, "join_sync", args)

    def broadcast(self) -> list[Any]:
        """Every rank joins the export; rank 0 broadcasts. Returns the calls' refs."""
        return self._all("broadcast_weights")

    def load_checkpoint(self, directory: str) -> dict[str, Any]:
        """Restore every rank from `directory`; return the JSON the driver stored with it."""
        return self.get(self._all("load_checkpoint", directory))[0]

    def save_checkpoint(self, directory: str, step: int, extra: dict[str, Any]) -> None:
        """Checkpoint after `step` steps, with the run config and `extra` (rank 0 writes)."""
        self.get(self._all("save_checkpoint", directory, step,
                           {"config": to_dict(self.cfg), **extra}))

    def close(self) -> None:
        self.group.close()
