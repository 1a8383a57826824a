"""Weights leaving the learner: under HF names (LoRA merged) and on the CPU."""

from __future__ import annotations

import torch

from arl.model.lora import is_lora, merged_state_dict


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


def weight_shapes(model: torch.nn.Module) -> list[tuple[str, tuple[int, ...], int]]:
    """(HF name, full shape, key) of every tensor `hf_state_dict` gives, from parameter
    metadata alone: nothing is copied or gathered (a ZeRO-3 partition reports its whole
    shape, `ds_shape`). Tied names share a key."""
    base = model.get_base_model() if is_lora(model) else model
    out = []
    for name, tensor in base.state_dict(keep_vars=True).items():
        if ".lora_" in name:
            continue  # merged into the base weight it adapts
        shape = tuple(getattr(tensor, "ds_shape", None) or tensor.shape)
        out.append((name.replace(".base_layer.", "."), shape, id(tensor)))
    return out
