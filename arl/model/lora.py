"""LoRA for the learner, through peft (`learner.lora.rank > 0`; the `lora` extra).

Only the adapters train: the optimizer holds state for them alone, so AdamW's memory shrinks
from 8 bytes per model parameter to 8 per adapter parameter. Rollout engines know nothing of
adapters: `merged_state_dict` gives them ordinary HF weights, W + (alpha / rank) * B @ A for
every adapted layer, computed on the side without touching the trained model.
"""

from __future__ import annotations

from typing import Any

import torch

from arl.config import LoraConfig

ADAPTER = "default"  # peft's name for the one adapter a model gets


def apply_lora(model: torch.nn.Module, cfg: LoraConfig) -> torch.nn.Module:
    """Wrap `model` with LoRA adapters (dropout 0: the trained policy must be the sampling
    policy). Base weights are frozen. Raises ImportError naming the extra if peft is
    missing, ValueError if no target module exists in the model."""
    try:
        import peft
    except ImportError as err:
        raise ImportError("learner.lora needs peft: pip install -e '.[lora]'") from err
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    missing = [m for m in cfg.target_modules if m not in names]
    if missing:
        raise ValueError(f"learner.lora.target_modules {missing} are not modules of the model")
    lora = peft.LoraConfig(r=cfg.rank, lora_alpha=cfg.alpha, lora_dropout=0.0, bias="none",
                           target_modules=list(cfg.target_modules))
    return peft.get_peft_model(model, lora)


def is_lora(model: torch.nn.Module) -> bool:
    return hasattr(model, "peft_config")


def merged_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """HF names -> tensors of the base model with every adapter merged in (new tensors for
    adapted weights, the model's own for the rest; tied weights keep sharing storage)."""
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    out: dict[str, torch.Tensor] = {}
    for name, tensor in base.state_dict().items():
        if ".lora_" in name:
            continue
        out[name.replace(".base_layer.", ".")] = tensor
    with torch.no_grad():
        for name, module in base.named_modules():
            if isinstance(module, LoraLayer) and ADAPTER in module.lora_A:
                weight = module.get_base_layer().weight
                out[f"{name}.weight"] = weight + module.get_delta_weight(ADAPTER).to(weight.dtype)
    return out
