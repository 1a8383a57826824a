"""Training backends: who owns the optimizer, applies gradients and gathers full weights.

`GSPOLearner` (arl/learner/gspo_learner.py) computes losses; a backend turns them into updates.
Every backend honours one contract, so the learner step and its numbers are the same
whichever runs (`learner.resources.backend`):

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

`TorchBackend` (arl/learner/torch_backend.py) is plain torch: AdamW on this process's parameters
and, in a group, one flat all-reduce of the gradients (arl/learner/distributed.py).
`arl/learner/deepspeed_backend.py` hosts DeepSpeed ZeRO 1-3.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from arl.config import LearnerConfig


class Backend(Protocol):
    """What a training backend provides (the contract above)."""

    module: torch.nn.Module
    uniform_passes: bool
    rank: int
    world: int

    def join_group(self, rank: int, world: int, address: str, port: int) -> None: ...

    def set_lr(self, lr: float) -> None: ...

    def backward(self, loss: torch.Tensor) -> None: ...

    def step(self, loss_finite: bool) -> tuple[float, bool]: ...

    def full_state_dict(self) -> dict[str, torch.Tensor] | None: ...

    def checkpoint_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None: ...

    def load_state(self, params: dict[str, torch.Tensor], optimizer: dict[str, Any]) -> None: ...


def make_backend(model: torch.nn.Module, cfg: LearnerConfig, device: torch.device) -> Backend:
    """The backend `cfg.resources.backend` names, owning `model`'s updates from now on."""
    if cfg.resources.backend == "deepspeed":
        from arl.learner.deepspeed_backend import DeepSpeedBackend

        return DeepSpeedBackend(model, cfg, device)
    from arl.learner.torch_backend import TorchBackend

    if cfg.resources.backend != "torch":
        raise ValueError("learner.resources.backend must be torch | deepspeed, got "
                         f"{cfg.resources.backend!r}")
    return TorchBackend(model, cfg, device)
