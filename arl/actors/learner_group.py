"""The learner side of the cluster: M learner actors, in one data-parallel group when M > 1.

Every call goes to every rank (DeepSpeed gathers need them all); rank 0's result is the one
that counts (it exports weights and writes checkpoints). Every wait on the group watches all
ranks: when one rank's process has died, the wait raises `LearnerLost` at once (a survivor
may be stuck in a collective with the dead one); the driver then rebuilds the whole group.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import ray

from arl.actors.group import ActorGroup
from arl.actors.hosts import Host, Placement
from arl.actors.learner import LearnerActor
from arl.config import Config, to_dict
from arl.errors import LearnerLost
from arl.model.transport import Layout

PROBE_TIMEOUT_S = 30.0  # how long a live learner may take to answer a probe


class LearnerGroup:
    """The learner actors of one run."""

    def __init__(self, cfg: Config, host: Host, placement: Placement, generation: int = 0):
        """generation: how many groups this run built before this one (a rebuilt group's
        actors get names of their own: a killed actor's name may not be free yet)."""
        self.cfg = cfg
        name = f"{cfg.run_name}-learner" + (f"-g{generation}" if generation else "")
        self.group = ActorGroup(
            LearnerActor,
            [(cfg.model, cfg.learner, cfg.steps, cfg.seed, cfg.rollout.temperature,
              cfg.learner.resources.cpus, placement.shipped)] * cfg.learner.resources.num_workers,
            num_cpus=cfg.learner.resources.cpus, num_gpus=cfg.learner.resources.gpus,
            resources=cfg.learner.resources.custom, host=host, name=name,
            scheduling=placement.learner,
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
        """Resolve references of this group's calls (one, or a list; others' calls may be
        among them). Raises `LearnerLost` as soon as a rank has died, else what a call
        raised, or GetTimeoutError after `timeout` s."""
        pending = refs if isinstance(refs, list) else [refs]
        results: dict[int, Any] = {}
        for i in self._each_ready(pending, timeout):
            try:
                results[i] = self.group.get(pending[i])
            except ray.exceptions.RayError:
                self.probe()  # a dead rank, or a collective that failed because of one
                raise
        if len(results) < len(pending):
            raise ray.exceptions.GetTimeoutError(f"learner call took over {timeout}s")
        out = [results[i] for i in range(len(pending))]
        return out if isinstance(refs, list) else out[0]

    def probe(self) -> None:
        """Raise `LearnerLost` if any rank's process has died. A live rank answers once its
        current call ends; one still busy after PROBE_TIMEOUT_S counts as alive."""
        refs = self._all("pid")
        for i in self._each_ready(refs, PROBE_TIMEOUT_S):
            try:
                self.group.get(refs[i])
            except ray.exceptions.RayActorError as err:
                raise LearnerLost(f"learner rank {i} died ({type(err).__name__})") from err

    def _each_ready(self, refs: list[Any], timeout: float | None) -> Iterator[int]:
        """Indices of `refs` as they complete, in completion order, until all have or
        `timeout` s (None: no limit) have passed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        left = list(range(len(refs)))
        while left:
            wait = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            ready = [left[j] for j in self.group.wait([refs[i] for i in left], wait)]
            if not ready:
                return
            left = [i for i in left if i not in ready]
            yield from ready

    def submit_step(self, advantages: np.ndarray, keep: np.ndarray,
                    trajectory_refs: list[Any]) -> list[Any]:
        """Start one learner step (every rank reads the whole batch from the object store);
        return every rank's reference (rank 0's holds the metrics)."""
        return self._all("step", advantages, keep, *trajectory_refs)

    def export(self) -> Any:
        """The reference to the full current weights (rank 0's export; all ranks join)."""
        return self._all("export_weights")[0]

    def weight_layout(self, dtype: str) -> Layout:
        return self.get(self._all("weight_layout", dtype))[0]

    def rendezvous(self) -> tuple[str, int]:
        """(address, free port) on rank 0's node."""
        return self.get(self.group.submit_one(0, "rendezvous", ()))

    def join_sync(self, *args: Any) -> Any:
        """Rank 0 joins a weight-sync group (arl/model/transport.py); returns the call's ref."""
        return self.group.submit_one(0, "join_sync", args)

    def broadcast(self) -> list[Any]:
        """Every rank joins the export; rank 0 broadcasts. Returns the calls' refs."""
        return self._all("broadcast_weights")

    def load_checkpoint(self, directory: str) -> dict[str, Any]:
        """Restore every rank from `directory`; return the JSON the driver stored with it."""
        return self.get(self._all("load_checkpoint", directory))[0]

    def save_checkpoint(self, directory: str, step: int, extra: dict[str, Any],
                        policies: dict[int, Any] | None = None) -> None:
        """Checkpoint after `step` steps, with the run config, `extra` (JSON) and older weight
        versions `policies` (rank 0 writes)."""
        self.get(self._all("save_checkpoint", directory, step,
                           {"config": to_dict(self.cfg), **extra}, policies))

    def close(self) -> None:
        self.group.close()
