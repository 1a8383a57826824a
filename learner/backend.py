"""Training backends: who owns the optimizer, applies gradients and gathers full weights.

`GSPOLearner` (learner/step.py) computes losses; a backend turns them into updates. Every
backend honours one contract, so the learner step and its numbers are the same whichever
runs (`learner.backend`):

  module                the model to call forward on
  uniform_passes        True: every rank of the group must make the same number of forward and
                        backward passes per optimizer step (their collectives run inside them)
  join_group(...)       become rank r of a data-parallel group of `world`
  set_lr(lr)            the learning rate of the next optimizer step
  backward(loss)        accumulate d(loss)/d(params); the loss is already divided by the
                        global mini-batch size, so summing over micro-batches and ranks gives
                        the whole mini-batch's gradient
  step(loss_finite)     sum gradients over the group, clip to `grad_clip`, apply unless
                        non-finite; -> (grad norm before clipping, applied)
  full_state_dict()     {HF name: full tensor} of the current weights on rank 0 (tied names
                        share one tensor), None on other ranks; every rank must call it
  checkpoint_state()    (full fp32 parameters, a torch AdamW state_dict over the trainable
                        parameters in `parameters()` order), on rank 0; None elsewhere;
                        every rank must call it. The same format for every backend and group
                        size, so a checkpoint resumes under any of them
  load_state(p, o)      restore what `checkpoint_state` returned (every rank)

`TorchBackend` is plain torch: AdamW on this process's parameters and, in a group, one flat
all-reduce of the gradients (learner/distributed.py). `learner/deepspeed_backend.py` hosts
DeepSpeed ZeRO 1-3.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch

from arl.config import LearnerConfig
from learner import distributed
from learner.lora import is_lora, merged_state_dict
from learner.optim import build_optimizer, set_lr


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
        distributed.join(rank, world, address, port, self.device)
        self.rank, self.world = rank, world

    def set_lr(self, lr: float) -> None:
        set_lr(self.optimizer, lr)

    def backward(self, loss: torch.Tensor) -> None:
        loss.backward()

    def step(self, loss_finite: bool) -> tuple[float, bool]:
        if self.world > 1:
            distributed.all_reduce_grads(self.module.parameters())
        norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.cfg.grad_clip).item()
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


def make_backend(model: torch.nn.Module, cfg: LearnerConfig, device: torch.device):
    """The backend `cfg.backend` names, owning `model`'s updates from now on."""
    if cfg.backend == "deepspeed":
        from learner.deepspeed_backend import DeepSpeedBackend

        return DeepSpeedBackend(model, cfg, device)
    if cfg.backend != "torch":
        raise ValueError(f"learner.backend must be torch | deepspeed, got {cfg.backend!r}")
    return TorchBackend(model, cfg, device)


def hf_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights under HF names (LoRA adapters merged in)."""
    return merged_state_dict(model) if is_lora(model) else model.state_dict()


def to_cpu(value):
    """The same nested structure with every tensor on the CPU (checkpoints are written there;
    `load_state_dict` moves AdamW state back to the parameters' device)."""
    if isinstance(value, torch.Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: to_cpu(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_cpu(v) for v in value]
    return value
