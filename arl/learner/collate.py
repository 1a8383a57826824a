"""Trajectories -> padded torch tensors, and row selections of them (mini- and micro-batches).

Token ids are used exactly as the rollout engine produced them: nothing is decoded or
re-tokenised here (docs/ARCHITECTURE.md, Lessons), so the trained tokens are the sampled tokens.

Layout: right padding; T = the longest row in the batch. Pad positions have
attention_mask 0, loss_mask 0 and sampler/old logprobs 0, so they never reach a loss.

Rows: a trajectory is one batch row, except an agent episode recorded as k > 1 rows
(`Trajectory.row_starts`, after its conversation stopped extending the recorded prefix). Each
of its rows is a sequence of its own, with its own GSPO ratio over its own sampled tokens,
and weight 1/k: its advantage is scaled by 1/k and it counts 1/k in the loss normaliser
(`Batch.weights`). So an episode weighs the same in the loss however many rows it took, and
a batch without splits is exactly what it was (all weights 1).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from arl.types import Trajectory


@dataclass(frozen=True)
class Batch:
    """A padded batch; row i of every field is the same sequence.

    input_ids         [B, T] int64  token ids, right-padded with `pad_id`
    attention_mask    [B, T] int64  1 on real tokens, 0 on padding
    loss_mask         [B, T] float32 1 only on tokens the policy sampled
    advantages        [B]    float32 one per sequence, or [B, T] one per token (turn-level)
    sampler_logprobs  [B, T] float32 the rollout engine's log-probs (0 off the loss mask)
    weights           [B]    float32 1/k for each of an episode's k rows (1 for most): what a
                      row counts in the loss normaliser; `advantages` are already scaled by it
    old_logprobs      [B, T] float32 under the weights at the start of the learner step; None
                      until the learner fills it in with `with_old_logprobs`
    ref_logprobs      [B, T] float32 under the reference policy (`learner.loss.kl_coef` > 0);
                      None otherwise
    """

    input_ids: Tensor
    attention_mask: Tensor
    loss_mask: Tensor
    advantages: Tensor
    sampler_logprobs: Tensor
    weights: Tensor
    old_logprobs: Tensor | None = None
    ref_logprobs: Tensor | None = None

    @property
    def size(self) -> int:
        """B: sequences in the batch."""
        return int(self.input_ids.shape[0])

    @property
    def num_tokens(self) -> int:
        """Non-pad tokens in the batch (what a forward pass really processes)."""
        return int(self.attention_mask.sum().item())

    @property
    def first_loss_column(self) -> int:
        """The first column where any row has a sampled token (1 if none has): columns
        before it need no log-prob."""
        columns = self.loss_mask.any(dim=0).nonzero()
        return int(columns[0]) if len(columns) else 1

    def with_old_logprobs(self, old_logprobs: Tensor) -> Batch:
        """A copy carrying `old_logprobs` [B, T] (detached, float32)."""
        return self._with_logprobs("old_logprobs", old_logprobs)

    def with_ref_logprobs(self, ref_logprobs: Tensor) -> Batch:
        """A copy carrying the reference policy's `ref_logprobs` [B, T] (detached, float32)."""
        return self._with_logprobs("ref_logprobs", ref_logprobs)

    def _with_logprobs(self, name: str, logprobs: Tensor) -> Batch:
        if logprobs.shape != self.input_ids.shape:
            raise ValueError(f"{name} shape {tuple(logprobs.shape)} != batch shape "
                             f"{tuple(self.input_ids.shape)}")
        return dataclasses.replace(self, **{name: logprobs.detach().float()})

    def select(self, rows: Sequence[int] | Tensor | np.ndarray) -> Batch:
        """The given rows, in the given order, with trailing all-pad columns trimmed.

        Trimming is exact: padding is on the right and attention is causal, so no real token
        ever attends to a trimmed column. Rows keep their identity (every field is indexed
        with the same `rows`); the caller decides the order.
        """
        index = torch.as_tensor(np.asarray(rows, dtype=np.int64))
        if index.numel() == 0:
            raise ValueError("select needs at least one row")
        length = _longest(self.attention_mask.index_select(0, index))
        fields = {
            f.name: _take(getattr(self, f.name), index, length) for f in dataclasses.fields(self)
        }
        return Batch(**fields)

    def split(self, size: int) -> list[Batch]:
        """Consecutive chunks of at most `size` rows (the last may be smaller), each trimmed."""
        if size <= 0:
            raise ValueError(f"split size must be positive, got {size}")
        return [self.select(range(s, min(s + size, self.size))) for s in range(0, self.size, size)]


def collate(trajectories: Sequence[Trajectory], advantages: np.ndarray, pad_id: int) -> Batch:
    """Stack trajectories into a right-padded Batch: one row per trajectory row, in order
    (row i is trajectories[i] when none has several rows; see the module docstring).

    advantages: [B], one per trajectory, in the same order; or an object array of B arrays,
    one advantage per model turn of each trajectory (`learner.advantage.level: turn`), which become
    [B, T] per-token advantages over each turn's sampled ids. Raises ValueError on an empty
    batch, a length mismatch between the advantages and the trajectories (or their turns),
    a trajectory whose token_ids, loss_mask and sampler_logprobs differ in length, or
    row_starts that do not cut token_ids into non-empty rows.
    Non-finite advantages pass through: the learner detects them in the loss and skips that
    optimizer step.
    """
    if not trajectories:
        raise ValueError("collate needs at least one trajectory")
    per_turn = isinstance(advantages, np.ndarray) and advantages.dtype == object
    adv = advantages if per_turn else np.asarray(advantages, dtype=np.float32).reshape(-1)
    if len(adv) != len(trajectories):
        raise ValueError(f"{len(adv)} advantages for {len(trajectories)} trajectories")
    rows = [(i, row) for i, traj in enumerate(trajectories) for row in _rows(i, traj)]
    input_ids, attention_mask = right_pad([trajectories[i].token_ids[r] for i, r in rows],
                                          pad_id)
    size, length = input_ids.shape
    loss_mask = np.zeros((size, length), dtype=np.float32)
    sampler_logprobs = np.zeros((size, length), dtype=np.float32)
    weights = np.array([1.0 / len(trajectories[i].rows) for i, _ in rows], dtype=np.float32)
    for b, (i, row) in enumerate(rows):
        mask, traj = trajectories[i].loss_mask[row], trajectories[i]
        loss_mask[b, : len(mask)] = mask
        # Zero off the mask whatever the engine wrote there: the gap metric reads mask tokens.
        sampler_logprobs[b, : len(mask)] = np.where(mask != 0, traj.sampler_logprobs[row], 0.0)
    if per_turn:
        row_adv = _token_advantages(trajectories, rows, adv, length) * weights[:, None]
    else:
        row_adv = np.array([adv[i] for i, _ in rows], dtype=np.float32) * weights
    return Batch(
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=torch.from_numpy(loss_mask),
        advantages=torch.from_numpy(row_adv.astype(np.float32)),
        sampler_logprobs=torch.from_numpy(sampler_logprobs),
        weights=torch.from_numpy(weights),
    )


def _rows(i: int, traj: Trajectory) -> list[slice]:
    """The rows of trajectory `i`, checked."""
    lengths = {len(traj.token_ids), len(traj.loss_mask), len(traj.sampler_logprobs)}
    if len(lengths) != 1 or 0 in lengths:
        raise ValueError(
            f"trajectory {i}: token_ids, loss_mask and sampler_logprobs must share one "
            f"non-zero length, got {len(traj.token_ids)}, {len(traj.loss_mask)}, "
            f"{len(traj.sampler_logprobs)}"
        )
    rows = traj.rows
    if any(r.stop <= r.start for r in rows):
        raise ValueError(f"trajectory {i}: row_starts {traj.row_starts} must increase "
                         f"strictly inside its {len(traj.token_ids)} tokens")
    return rows


def _token_advantages(trajectories: Sequence[Trajectory], rows: list[tuple[int, slice]],
                      per_turn: np.ndarray, length: int) -> np.ndarray:
    """[rows, T] float32: turn t's advantage on the ids of turn t (Trajectory.turns) in the
    row that holds them, 0 else."""
    for i, (traj, adv) in enumerate(zip(trajectories, per_turn, strict=True)):
        if len(adv) != len(traj.turns):
            raise ValueError(f"trajectory {i}: {len(adv)} turn advantages for "
                             f"{len(traj.turns)} turns")
    out = np.zeros((len(rows), length), dtype=np.float32)
    for b, (i, row) in enumerate(rows):
        for turn, value in zip(trajectories[i].turns, per_turn[i], strict=True):
            if row.start <= turn.start < row.stop:
                out[b, turn.start - row.start: turn.end - row.start] = value
    return out


def right_pad(sequences: Sequence[Sequence[int] | np.ndarray], pad_id: int
              ) -> tuple[Tensor, Tensor]:
    """[B, T] int64 input_ids (right-padded with `pad_id`) and attention_mask (1 on real
    tokens) of `sequences`, T the longest."""
    length = max(len(seq) for seq in sequences)
    input_ids = np.full((len(sequences), length), pad_id, dtype=np.int64)
    attention_mask = np.zeros((len(sequences), length), dtype=np.int64)
    for i, seq in enumerate(sequences):
        input_ids[i, : len(seq)] = seq
        attention_mask[i, : len(seq)] = 1
    return torch.from_numpy(input_ids), torch.from_numpy(attention_mask)


def _longest(attention_mask: Tensor) -> int:
    """Columns up to and including the last real token of any row (right padding)."""
    positions = torch.arange(1, attention_mask.shape[1] + 1)  # [T]
    return int((attention_mask * positions).max().item())


def _take(value: Tensor | None, index: Tensor, length: int) -> Tensor | None:
    """Rows `index` of a [B] or [B, T] field, trimmed to `length` columns."""
    if value is None:
        return None
    rows = value.index_select(0, index)
    return rows[:, :length].contiguous() if rows.dim() == 2 else rows
