"""A checkpoint as a standard Hugging Face model folder: config, tokenizer, chat template and
safetensors weights (LoRA adapters merged), which `AutoModelForCausalLM.from_pretrained`,
`AutoTokenizer.from_pretrained` and vLLM load unchanged."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from arl.config import LoraConfig
from arl.files import mark
from arl.model.causal_lm import torch_dtype
from arl.model.checkpoint.store import CheckpointError, load_checkpoint, model_files


def export_checkpoint(checkpoint: str | os.PathLike, out_dir: str | os.PathLike,
                      dtype: str = "float32") -> Path:
    """Write the checkpoint's policy to `out_dir` (which must not exist or be empty) as a HF
    model folder, weights in `dtype`; return it. Reads only what the checkpoint's manifest
    lists, every file checked against its sha256 (`load_checkpoint`, `model_files`): a
    file a checkpoint holds but does not list, or a symbolic link, never reaches the export.
    The folder carries arl's marker (arl/files.py). Raises CheckpointError for a
    checkpoint without its model files (format 1) or a bad file."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CheckpointError(f"{out} exists and is not an empty folder")
    loaded = load_checkpoint(checkpoint)
    files = model_files(checkpoint)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        for name, data in files.items():  # config, tokenizer; save_pretrained adds the weights
            (tmp / name).write_bytes(data)
        config = AutoConfig.from_pretrained(tmp)
        params = loaded.state.model
        if any(".lora_" in name for name in params):  # adapters: merged as a weight sync does
            params = _merged_lora(config, _lora_config(loaded.extra_json, checkpoint), params)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        _load_exactly(model, params)
        model.to(torch_dtype(dtype)).save_pretrained(tmp)
        mark(tmp, "export")
        os.chmod(tmp, 0o755)  # noqa: S103 (a model folder others read)
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _lora_config(extra: dict, checkpoint: str | os.PathLike) -> LoraConfig:
    """The LoRA settings the checkpoint's run recorded, as plain values."""
    try:
        lora = extra["config"]["learner"]["lora"]
        return LoraConfig(rank=int(lora["rank"]), alpha=float(lora["alpha"]),
                          target_modules=[str(m) for m in lora["target_modules"]])
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"checkpoint {checkpoint} holds LoRA adapters but records no "
                              "learner.lora settings") from None


def _merged_lora(config, lora: LoraConfig, params: dict) -> dict:
    """HF weights of a LoRA checkpoint: its adapters put on a model of `config`, merged."""
    from arl.model.lora import apply_lora, merged_state_dict

    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    wrapped = apply_lora(model, lora)
    with torch.no_grad():
        for name, param in wrapped.named_parameters():
            param.copy_(params[name])
    merged = {k: v.detach().clone() for k, v in merged_state_dict(wrapped).items()}
    return merged


def _load_exactly(model: torch.nn.Module, params: dict[str, torch.Tensor]) -> None:
    """Copy `params` into `model`; every parameter must be given (tied ones under either
    name), and nothing else."""
    own = dict(model.named_parameters())
    state = model.state_dict()
    unknown = set(params) - set(state)
    missing = set(own) - set(params)
    if unknown or missing:
        raise CheckpointError(f"checkpoint weights do not fit the model config: unknown "
                              f"{sorted(unknown)[:5]}, missing {sorted(missing)[:5]}")
    with torch.no_grad():
        for name, tensor in params.items():
            state[name].copy_(tensor)
