"""The learner worker: a GSPO learner as the driver talks to it (steps fed trajectories by
reference, weights out, checkpoints, weight-sync groups).

A plain class, free of Ray: arl/actors/learner.py hosts it as a Ray actor (with the model
folder shipped to its node, and its node's address for a group's rendezvous).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from arl.config import LearnerConfig, ModelConfig
from arl.dtypes import resolve as resolve_dtype
from arl.learner.gspo_learner import GSPOLearner
from arl.learner.state import weight_shapes
from arl.model.causal_lm import set_torch_threads
from arl.model.checkpoint.store import load_checkpoint, model_folder_files, save_checkpoint
from arl.model.transport import Layout, SyncGroup, layout_of_shapes
from arl.types import Trajectory


class LearnerWorker:
    """Owns the trained weights. `step` takes advantages and a keep mask first, then one
    trajectory list per rollout worker, so that Ray resolves each list straight from the
    object store."""

    def __init__(
        self,
        model: ModelConfig,
        cfg: LearnerConfig,
        total_steps: int,
        seed: int,
        temperature: float,
        threads: int,
    ):
        """`model.path` is a model folder on this machine."""
        set_torch_threads(threads)
        self.temperature = temperature
        self.consumed: set[int] = set()  # episode ids trained on: the consumer-side ledger
        self.learner = GSPOLearner(model.path, cfg, model.dtype, total_steps, seed)
        # Checkpoints carry the model's config and tokenizer: each one is a usable model.
        self.model_files = model_folder_files(model.path)
        self.sync: SyncGroup | None = None  # rank 0's end of a collective weight sync

    def step(self, advantages: np.ndarray, keep: np.ndarray,
             *shards: Sequence[Trajectory]) -> dict[str, Any]:
        """Train on the trajectories where `keep` [B] is true, with their advantages [B].
        A trajectory whose episode id was trained on before is dropped and counted in
        `learner/duplicate_trajectories` (a replayed share must never count twice)."""
        trajectories = [t for shard in shards for t in shard]
        rows, duplicates = [], 0
        for i in np.flatnonzero(keep):
            episode = trajectories[i].episode_id  # -1: not numbered, not tracked
            if episode in self.consumed:
                duplicates += 1
                continue
            if episode >= 0:
                self.consumed.add(episode)
            rows.append(i)
        metrics = self.learner.step([trajectories[i] for i in rows], advantages[rows],
                                    temperature=self.temperature)
        return {**metrics, "learner/duplicate_trajectories": float(duplicates)}

    def pid(self) -> int:
        """This process's id (a probe of liveness)."""
        return os.getpid()

    def join_group(self, rank: int, world: int, address: str, port: int) -> None:
        """Become rank `rank` of `world` data-parallel learners (arl/learner/distributed.py)."""
        self.learner.join_group(rank, world, address, port)

    def export_weights(self) -> dict[str, np.ndarray]:
        """The full weights on rank 0, {} on other ranks (every rank must call it)."""
        return self.learner.export_weights()

    def weight_layout(self, dtype: str) -> Layout | None:
        """What a collective weight sync broadcasts, on rank 0 (None elsewhere), read from
        the parameters' metadata: no weight is gathered."""
        if self.learner.dp.rank != 0:
            return None
        # The broadcast travels in the rollout dtype; auto resolves as on the sender's device.
        return layout_of_shapes(weight_shapes(self.learner.model),
                                resolve_dtype(dtype, self.learner.device.type == "cuda"))

    def join_sync(self, address: str, port: int, world: int, backend: str, layout: Layout,
                  bucket_bytes: int, timeout_s: float) -> None:
        """Rank 0 only: become rank 0 of a (new) weight-sync group of `world` members,
        hosting its rendezvous on address:port (arl/model/transport.py)."""
        if self.sync is not None:
            self.sync.close()
        self.sync = SyncGroup(address, port, 0, world, backend, timeout_s)
        self.layout, self.bucket_bytes = layout, bucket_bytes

    def broadcast_weights(self) -> None:
        """Send the current weights to the weight-sync group (every rank must call it:
        backends may gather; rank 0 sends)."""
        state = self.learner.backend.full_state_dict()
        if state is not None:
            self.sync.send(state, self.layout, self.bucket_bytes)

    def save_checkpoint(self, directory: str, step: int, extra: dict,
                        policies: dict[int, dict[str, np.ndarray]] | None = None) -> None:
        """Write the checkpoint from rank 0 (every rank must call it: backends may gather),
        with older weight versions `policies` (deterministic async runs)."""
        state = self.learner.state_dict_for_checkpoint()
        if state is not None:
            save_checkpoint(directory, state, step, extra, self.model_files, policies)

    def load_checkpoint(self, directory: str) -> dict:
        """Restore the learner from a checkpoint (verified); return the JSON the driver
        saved with it."""
        checkpoint = load_checkpoint(directory)
        self.learner.load_checkpoint_state(checkpoint.state)
        return checkpoint.extra_json
