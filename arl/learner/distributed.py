"""Data-parallel learners: M processes that form one torch.distributed group (gloo on CPU,
NCCL on GPU) and take the same optimizer steps.

Every rank sees the whole batch, shuffles it with the same seed and trains on its own slice of
each mini-batch. The loss of every sequence is divided by the size of the whole mini-batch
(the global normaliser), so the SUM of the ranks' gradients is the gradient one learner would
compute on the whole mini-batch: `all_reduce_grads` sums them before clipping, and every rank
then clips the same gradient and takes the same AdamW step. Weights never drift apart, and
the update is the same for any M up to floating-point summation order.

Plain torch, no Ray: actors/ decides which process is which rank.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

import torch
import torch.distributed as dist

from arl.model.transport import listen_on, rendezvous


def join(rank: int, world: int, address: str, port: int, device: torch.device,
         timeout_s: float = 600.0) -> None:
    """Join the group whose rank 0 listens on address:port (every rank calls this), over
    NCCL for CUDA tensors and gloo for CPU ones. Every socket of the group listens on
    `address` only (`rendezvous`, `listen_on`). A collective that waits longer than
    `timeout_s` for a peer (one that died) fails instead of hanging, so the driver can
    rebuild the group."""
    backend = "nccl" if device.type == "cuda" else "gloo"
    timeout = datetime.timedelta(seconds=timeout_s)
    store = rendezvous(address, port, rank, world, timeout)
    listen_on(address)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


def all_reduce_grads(params: Iterable[torch.Tensor]) -> None:
    """Sum the gradients of `params` over the group, in one flat buffer (a parameter without a
    gradient on this rank, e.g. one it had no rows for, contributes zeros)."""
    params = [p for p in params if p.requires_grad]
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    flat = torch.cat([p.grad.reshape(-1) for p in params])  # [sum numel]
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    start = 0
    for p in params:
        n = p.numel()
        p.grad.copy_(flat[start : start + n].view_as(p.grad))
        start += n


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    """Element-wise sums of `values` over the group."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t.tolist()


def all_reduce_max(values: list[float], device: torch.device) -> list[float]:
    """Element-wise maxima of `values` over the group."""
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.tolist()


def gather_rows(rows: torch.Tensor, world: int) -> torch.Tensor:
    """[n_r, k] float64 on each rank -> [sum n_r, k] on every rank, in rank order (tensors of
    different lengths are padded for the collective, then trimmed)."""
    device = rows.device
    counts = torch.zeros(world, dtype=torch.int64, device=device)
    counts[dist.get_rank()] = rows.shape[0]
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    longest = int(counts.max())
    padded = torch.zeros(longest, rows.shape[1], dtype=rows.dtype, device=device)
    padded[: rows.shape[0]] = rows
    parts = [torch.empty_like(padded) for _ in range(world)]
    dist.all_gather(parts, padded)
    return torch.cat([part[: int(n)] for part, n in zip(parts, counts.tolist(), strict=True)])
