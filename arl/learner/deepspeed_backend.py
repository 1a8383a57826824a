"""DeepSpeed ZeRO stage 1-3 as a training backend (`learner.resources.backend: deepspeed`).

The contract is arl/learner/backend.py's; what differs from plain torch:
- DeepSpeed partitions the AdamW state (stage 1), the gradients too (2) and the parameters
  too (3) over the data-parallel group, and does its own reduction, clipping and overflow
  check (a non-finite gradient skips the step, leaving weights and AdamW state unchanged).
- The learner, not DeepSpeed, decides where an optimizer step ends
  (`managed_gradient_accumulation: false`): a mini-batch is as many micro-batches as it takes.
  Stage 2 and 3 reduce inside every backward and stage 3 gathers parameters inside every
  forward, so all ranks make the same number of passes (`uniform_passes`).
- DeepSpeed averages gradients over the group; the learner's losses already carry the global
  normaliser, so `backward` multiplies by the group size to keep the SUM, as torch does.
- Weights and checkpoints leave in full: every rank joins the gathers, rank 0 keeps the
  result. Checkpoints hold full fp32 parameters and a torch AdamW state_dict, the same format
  as the torch backend's (never DeepSpeed's pickled files), so a run resumes under either
  backend, any ZeRO stage and any group size.

On a CPU, DeepSpeed runs with `DS_ACCELERATOR=cpu`, gloo and a torch optimizer (install with
`DS_BUILD_OPS=0`); the first start compiles a small communication op (about 40 s, cached).
"""

from __future__ import annotations

import copy
import math
import os
from typing import Any

import torch
import torch.distributed as dist

from arl.config import LearnerConfig
from arl.learner import distributed
from arl.learner.optim import build_optimizer, set_lr
from arl.learner.state import hf_state_dict
from arl.model.causal_lm import compute_dtype_on
from arl.model.transport import free_port

NEVER = 2**31 - 1  # steps between DeepSpeed's own progress prints: never


def deepspeed_config(cfg: LearnerConfig, compute_dtype: str) -> dict[str, Any]:
    """DeepSpeed's config for the learner. With bfloat16 matrix products it names them in a
    `torch_autocast` section: DeepSpeed's forward turns off an autocast it was not told of,
    and a bf16 run would train in fp32 unnoticed. No module is marked for bf16
    communication (`lower_precision_safe_modules: []`), so gradients are reduced in fp32
    onto fp32 master weights, as with the torch backend."""
    config: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": cfg.compute.micro_batch_size,
        "gradient_accumulation_steps": 1,
        "managed_gradient_accumulation": False,
        "gradient_clipping": cfg.optim.grad_clip,
        "zero_optimization": {"stage": cfg.resources.zero_stage},
        "steps_per_print": NEVER,
        "wall_clock_breakdown": False,
    }
    if compute_dtype == "bfloat16":
        config["torch_autocast"] = {"enabled": True, "dtype": "bfloat16",
                                    "lower_precision_safe_modules": []}
    return config


class DeepSpeedBackend:
    """A DeepSpeed engine around the model, built at first use (it needs the group)."""

    uniform_passes = True

    def __init__(self, model: torch.nn.Module, cfg: LearnerConfig, device: torch.device):
        self.cfg = cfg
        self.device = device
        self.compute_dtype = compute_dtype_on(cfg.compute.dtype, device)
        self.rank, self.world = 0, 1
        self._model = model
        self.trainable = [p for p in model.parameters() if p.requires_grad]
        self._optimizer = build_optimizer(self.trainable, cfg)
        # torch AdamW's param_groups over the trainable parameters: the checkpoint's format
        self._groups = copy.deepcopy(self._optimizer.state_dict()["param_groups"])
        self._engine = None

    def join_group(self, rank: int, world: int, address: str, port: int) -> None:
        distributed.join(rank, world, address, port, self.device,
                         self.cfg.resources.collective_timeout_s)
        self.rank, self.world = rank, world

    @property
    def engine(self):
        if self._engine is None:
            self._engine = self._initialize()
        return self._engine

    @property
    def module(self):
        return self.engine

    def _initialize(self):
        if self.device.type == "cpu":
            os.environ["DS_ACCELERATOR"] = "cpu"  # read when deepspeed is first imported
        if not dist.is_initialized():  # a single learner: a group of one on the loopback
            distributed.join(0, 1, "127.0.0.1", free_port(), self.device)
        # DeepSpeed reads its launcher's variables; Ray placed this process, and a Ray actor
        # sees only its own GPU, which is therefore device 0.
        os.environ.update(RANK=str(self.rank), WORLD_SIZE=str(self.world), LOCAL_RANK="0")
        import deepspeed

        engine, *_ = deepspeed.initialize(model=self._model, optimizer=self._optimizer,
                                          config=deepspeed_config(self.cfg, self.compute_dtype),
                                          dist_init_required=False)
        return engine

    def set_lr(self, lr: float) -> None:
        set_lr(self.engine.optimizer.optimizer, lr)  # the torch AdamW inside ZeRO

    def backward(self, loss: torch.Tensor) -> None:
        self.engine.backward(loss * self.world, scale_wrt_gas=False)

    def step(self, loss_finite: bool) -> tuple[float, bool]:
        """DeepSpeed's step: reduce, clip, apply unless a gradient is non-finite. A NaN loss
        has NaN gradients, so `loss_finite` needs no check of its own here."""
        self.engine.step()
        norm = self.engine.get_global_grad_norm()
        return (math.nan if norm is None else float(norm)), bool(self.engine.was_step_applied())

    def full_state_dict(self) -> dict[str, torch.Tensor] | None:
        model = self.engine.module
        if self.cfg.resources.zero_stage < 3:  # parameters are whole on every rank
            return hf_state_dict(model) if self.rank == 0 else None
        import deepspeed

        # ZeRO-3: one gather per tensor, copied straight to host memory, so the peak on the
        # GPU is one full tensor, not the model.
        full: dict[int, torch.Tensor | None] = {}
        out = {}
        for name, tensor in model.state_dict(keep_vars=True).items():
            if id(tensor) not in full:  # tied names share one Parameter
                with deepspeed.zero.GatheredParameters([tensor], modifier_rank=None):
                    full[id(tensor)] = (tensor.detach().to("cpu", copy=True)
                                        if self.rank == 0 else None)
            out[name] = full[id(tensor)]
        return out if self.rank == 0 else None

    def checkpoint_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]] | None:
        from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

        params = {}
        for name, p in self.engine.module.named_parameters():
            value = safe_get_full_fp32_param(p) if p.requires_grad else p.detach()
            params[name] = value.cpu().clone()
        state = {}
        step = self._adam_step()
        if step is not None:  # AdamW has state once a step was taken
            for i, p in enumerate(self.trainable):
                state[i] = {"step": torch.tensor(step, dtype=torch.float32)}
                for key in ("exp_avg", "exp_avg_sq"):
                    state[i][key] = safe_get_full_optimizer_state(p, key).cpu().clone()
        if self.rank != 0:
            return None
        groups = copy.deepcopy(self._groups)
        groups[0]["lr"] = self.engine.optimizer.optimizer.param_groups[0]["lr"]
        return params, {"state": state, "param_groups": groups}

    def load_state(self, params: dict[str, torch.Tensor], optimizer: dict[str, Any]) -> None:
        import deepspeed
        from deepspeed.utils import safe_set_full_fp32_param, safe_set_full_optimizer_state

        for name, p in self.engine.module.named_parameters():
            value = params[name].to(p.device)
            if hasattr(p, "ds_id"):  # ZeRO-3: write the whole tensor, re-partitioned on exit
                with deepspeed.zero.GatheredParameters([p], modifier_rank=0), torch.no_grad():
                    if self.rank == 0:
                        p.copy_(value)
            else:
                with torch.no_grad():
                    p.copy_(value)
            if p.requires_grad:
                safe_set_full_fp32_param(p, value)  # the fp32 partition AdamW updates
        if not optimizer["state"]:
            return
        zero = self.engine.optimizer
        step = float(optimizer["state"][0]["step"])
        for flat in self._flat_partitions():
            state = zero.optimizer.state[flat]
            if "exp_avg" not in state:  # torch creates AdamW state at the first step: now
                state.update(exp_avg=torch.zeros_like(flat), exp_avg_sq=torch.zeros_like(flat))
            state["step"] = torch.tensor(step, dtype=torch.float32)
        link = getattr(zero, "_lazy_init_hp_params_optimizer_state", None)  # ZeRO 1-2 views
        if link is not None:
            link()
        for i, p in enumerate(self.trainable):
            for key in ("exp_avg", "exp_avg_sq"):
                safe_set_full_optimizer_state(p, optimizer["state"][i][key].to(p.device), key)

    def _flat_partitions(self) -> list[torch.Tensor]:
        """This rank's flat fp32 partitions: the tensors the inner AdamW updates."""
        zero = self.engine.optimizer
        stage3 = getattr(zero, "fp32_partitioned_groups_flat", None)
        return list(stage3 if stage3 is not None else zero.single_partition_of_fp32_groups)

    def _adam_step(self) -> float | None:
        """AdamW's step count (the same for every partition), None before the first step."""
        base = self.engine.optimizer.optimizer
        steps = [base.state[f]["step"] for f in self._flat_partitions()
                 if "step" in base.state.get(f, {})]
        return float(steps[0]) if steps else None
