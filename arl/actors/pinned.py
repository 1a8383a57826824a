"""Pinned weights, for deterministic async runs (`mode: async`, `deterministic: true`).

A published version is kept in the object store instead of being queued on every rollout
worker. The pipeline has a worker load the version a chunk must play just before that chunk
(`hold`: Ray runs one caller's calls to an actor in order, so the load lands before the
chunk), and drops versions no chunk will play again (`release`). A checkpoint carries the
older versions the next steps play (`policies`), and `restore` brings them back.
"""

from __future__ import annotations

from typing import Any

from arl.actors.group import ActorGroup
from arl.config import Config


class PinnedWeights:
    """The kept versions and which one each rollout worker holds."""

    def __init__(self, rollout: ActorGroup, get: Any):
        self.rollout = rollout
        self.get = get  # resolves a kept reference (the host's get)
        self.kept: dict[int, Any] = {}  # version -> its weights: a reference, or a dict
        self.held: dict[int, int | None] = {}  # worker -> the version it holds

    @staticmethod
    def of(cfg: Config, rollout: ActorGroup, get: Any) -> PinnedWeights | None:
        """Pinned weights for a deterministic async run; None for any other."""
        return PinnedWeights(rollout, get) if cfg.mode == "async" and cfg.deterministic else None

    def keep(self, version: int, weights: Any) -> None:
        self.kept[version] = weights

    def pushed(self, version: int, weights: Any) -> None:
        """Every worker now holds `version` (a push)."""
        self.kept[version] = weights
        self.held = dict.fromkeys(range(len(self.rollout)), version)

    def loaded(self, worker: int, version: int) -> None:
        """`worker` was given `version` outside `hold` (a rebuilt worker's restore)."""
        self.held[worker] = version

    def hold(self, worker: int, version: int) -> None:
        """Make `worker`'s next call play `version` (a load queued first if it holds
        another)."""
        if self.held.get(worker) != version:
            self.rollout.submit_one(worker, "update_weights", (self.kept[version], version))
            self.held[worker] = version

    def versions(self) -> list[int]:
        """The versions `hold` can load, oldest first."""
        return sorted(self.kept)

    def release(self, below: int) -> None:
        """No chunk will play a version older than `below` any more."""
        self.kept = {v: w for v, w in self.kept.items() if v >= below}

    def policies(self, step: int, staleness: int) -> dict[int, Any]:
        """The kept versions the steps after `step` play (step - staleness .. step - 1), as
        weight dicts for a checkpoint."""
        return {v: w if isinstance(w, dict) else self.get(w, None)
                for v, w in self.kept.items() if step - staleness <= v < step}

    def restore(self, policies: dict[int, Any]) -> None:
        """Start again from a checkpoint's kept versions (nothing held yet)."""
        self.kept, self.held = dict(policies), {}
