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
from learner.checkpoint import CheckpointError, load_checkpoint, model_dir
from learner.model import torch_dtype


def export_checkpoint(checkpoint: str | os.PathLike, out_dir: str | os.PathLike,
                      dtype: str = "float32") -> Path:
    """Write the checkpoint's policy to `out_dir` (which must not exist or be empty) as a HF
    model folder, weights in `dtype`; return it. The checkpoint's hashes are verified first.
    A format-1 checkpoint (no hf/ folder) takes config and tokenizer from the model folder
    its run was configured with. Raises CheckpointError if there is neither."""
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CheckpointError(f"{out} exists and is not an empty folder")
    loaded = load_checkpoint(checkpoint)
    source = model_dir(checkpoint) or _recorded_model(loaded.extra_json, checkpoint)
    config = AutoConfig.from_pretrained(source)
    params = loaded.state.model
    if any(".lora_" in name for name in params):  # adapters: merge them as a weight sync does
        params = _merged_lora(config, loaded.extra_json["config"]["learner"]["lora"], params)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    _load_exactly(model, params)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.tmp-"))
    try:
        model.to(torch_dtype(dtype)).save_pretrained(tmp)
        for entry in Path(source).iterdir():  # config and tokenizer files; weights are ours
            if entry.is_file() and not (tmp / entry.name).exists():
                shutil.copyfile(entry, tmp / entry.name)
        os.chmod(tmp, 0o755)  # noqa: S103 (a model folder others read)
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _recorded_model(extra: dict, checkpoint: str | os.PathLike) -> str:
    path = extra.get("config", {}).get("model", {}).get("path")
    if not path or not os.path.isfile(os.path.join(path, "config.json")):
        raise CheckpointError(f"checkpoint {checkpoint} carries no model config (format 1) and "
                              f"the model it was trained from ({path!r}) is not here")
    return path


def _merged_lora(config, lora: dict, params: dict) -> dict:
    """HF weights of a LoRA checkpoint: its adapters put on a model of `config`, merged."""
    from learner.lora import apply_lora, merged_state_dict

    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    wrapped = apply_lora(model, LoraConfig(**lora))
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
