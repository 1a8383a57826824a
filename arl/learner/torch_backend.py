"""The plain torch training backend: AdamW in this process and, in a data-parallel group,
one flat all-reduce of the gradients (the contract is arl/learner/backend.py's)."""

from __future__ import annotations

import copy
import math
from typing import Any

import torch

from arl.config import LearnerConfig
from arl.learner import distributed
from arl.learner.optim import build_optimizer, set_lr
from arl.learner.state import hf_state_dict, to_cpu


class TorchBackend:
    """AdamW in this process; gradients summed over the group before clipping."""

    uniform_passes = False

    def __init__(self, model: torch.nn.Module, cfg: LearnerConfig, device: torch.device):
        self.module = model
        self.cfg = cfg
        self.device = device
        self.rank, self.world = 0, 1
        self.optimizer = build_optimizer([p for p in model.parameters() if p.requires_grad],
                                         cfg)

    def join_group(self, rank: int, world: int, address: str, port: int) -> None:
        distributed.join(rank, world, address, port, self.device,
                         self.cfg.resources.collective_timeout_s)
        self.rank, self.world = rank, world

    def set_lr(self, lr: float) -> None:
        set_lr(self.optimizer, lr)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self, loss_finite: bool) -> tuple[float, bool]:
        if self.world > 1:
            distributed.all_reduce_grads(self.module.parameters())
        norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(),
                                              self.cfg.optim.grad_clip).item()
        applied = loss_finite and math.isfinite(norm)
        if applied:
            self.optimizer.step()
        # Skipped: gradients (possibly NaN) are dropped before AdamW ever sees them.
        self.optimizer.zero_grad(set_to_none=True)
        return norm, applied

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        return hf_state_dict(self.module) if self.rank == 0 else None

    def checkpoint_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
        if self.rank != 0:
            return None
        params = {n: p.detach().cpu().clone() for n, p in self.module.named_parameters()}
        return params, to_cpu(copy.deepcopy(self.optimizer.state_dict()))

    def load_state(self, params: dict[str, torch.Tensor], optimizer: dict[str, Any]) -> None:
        with torch.no_grad():
            for name, param in self.module.named_parameters():
                param.copy_(params[name])
        self.optimizer.load_state_dict(optimizer)
