"""A learner step's view of its data-parallel group: which rows are this rank's, how many
passes every rank makes, and the sums and gathers that make every rank report on the whole
batch. With one learner (world 1) every method is the identity.

The GSPO step (arl/learner/gspo_learner.py) stays single-rank: it asks this module for its share
of each mini-batch and for the group's totals, and the backend sums the gradients.
"""

from __future__ import annotations

import numpy as np
import torch

from arl import gspo
from arl.learner import distributed
from arl.learner.backend import Backend


class DataParallel:
    """The group a backend has joined (rank and world come from it)."""

    def __init__(self, backend: Backend, micro_batch_size: int, device: torch.device):
        self.backend = backend
        self.micro_batch_size = micro_batch_size
        self.device = device

    @property
    def rank(self) -> int:
        return self.backend.rank

    @property
    def world(self) -> int:
        return self.backend.world

    def share(self, rows: np.ndarray) -> np.ndarray:
        """This rank's slice of a mini-batch's rows (np.array_split: the first ranks get the
        extra row)."""
        return np.array_split(rows, self.world)[self.rank]

    def passes(self, rows: int) -> int:
        """How many forward (and backward) passes every rank makes on a mini-batch of `rows`
        sequences when the backend runs collectives inside them (`uniform_passes`): the
        largest rank share's micro-batch count. 0 otherwise: each rank makes its own count."""
        if not self.backend.uniform_passes:
            return 0
        largest = -(-rows // self.world)
        return -(-largest // self.micro_batch_size)

    def sum(self, values: list[float]) -> list[float]:
        """Element-wise sums of `values` over the group."""
        if self.world == 1:
            return values
        return distributed.all_reduce_sum(values, self.device)

    def max(self, values: list[float]) -> list[float]:
        """Element-wise maxima of `values` over the group."""
        if self.world == 1:
            return values
        return distributed.all_reduce_max(values, self.device)

    def gathered(self, outputs: list[gspo.LossOutput], lengths: list[torch.Tensor]
                 ) -> tuple[list[gspo.LossOutput], list[torch.Tensor]]:
        """Every rank's per-sequence diagnostics (ratio, clip flags, response length), as one
        LossOutput and one length tensor covering the whole batch."""
        if self.world == 1:
            return outputs, lengths
        if outputs:
            mine = torch.stack([
                torch.cat([o.ratio.reshape(-1) for o in outputs]).double(),
                torch.cat([o.clipped_low.reshape(-1) for o in outputs]).double(),
                torch.cat([o.clipped_high.reshape(-1) for o in outputs]).double(),
                torch.cat([n.reshape(-1) for n in lengths]).double(),
            ], dim=1)  # [n, 4]
        else:  # this rank had no rows in any mini-batch
            mine = torch.zeros(0, 4, dtype=torch.float64)
        rows = distributed.gather_rows(mine.to(self.device), self.world).cpu()  # [B, 4]
        merged = gspo.LossOutput(torch.zeros(()), rows[:, 0], rows[:, 1], rows[:, 2])
        return [merged], [rows[:, 3]]
