"""AdamW and the learning-rate schedule of the learner.

The schedule is a pure function of the learner step (`GSPOLearner.version`), not of the
optimizer step: every mini-batch of one learner step uses the same learning rate, and the
schedule's `total_steps` is the run's number of learner steps (`Config.steps`), whatever
`mini_batches` is. Being a function of the step, it needs no state of its own in a checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from arl.config import LearnerConfig

BETAS = (0.9, 0.999)
EPS = 1e-8


def build_optimizer(params: Iterable[torch.nn.Parameter], cfg: LearnerConfig) -> torch.optim.AdamW:
    """AdamW over `params` with betas (0.9, 0.999), eps 1e-8, cfg.optim.lr and
    cfg.optim.weight_decay."""
    return torch.optim.AdamW(params, lr=cfg.optim.lr, betas=BETAS, eps=EPS,
                             weight_decay=cfg.optim.weight_decay)


def lr_factor(step: int, warmup_steps: int, total_steps: int, schedule: str) -> float:
    """Multiplier of the base lr for learner step `step` (0-based).

    Warmup: linear, (step + 1) / warmup_steps for the first `warmup_steps` steps, so the first
    step already learns and step warmup_steps - 1 reaches the full lr. Then `constant` stays at
    1; `cosine` decays as 0.5 * (1 + cos(pi * p)), p = (step - warmup) / (total - warmup),
    reaching 0 at step `total_steps` (and staying at 0 after it).
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"lr_schedule must be constant | cosine, got {schedule!r}")


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group."""
    for group in optimizer.param_groups:
        group["lr"] = lr
