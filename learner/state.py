"""Weights leaving the learner: under HF names (LoRA merged) and on the CPU."""

from __future__ import annotations

import torch

from learner.lora import is_lora, merged_state_dict


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
