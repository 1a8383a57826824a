"""`arl export CHECKPOINT OUT_DIR`: a checkpoint as a standard Hugging Face model folder."""

from __future__ import annotations

import os

from arl.errors import UserError
from arl.model.checkpoint.runs import resolve_checkpoint


def export(checkpoint: str, out_dir: str, dtype: str = "float32") -> str:
    """Export the checkpoint `checkpoint` names (a run dir, checkpoints/latest, step_<n>)
    to `out_dir`; return a line saying where it went and how to load it."""
    path = resolve_checkpoint(checkpoint)
    from arl.model.checkpoint.export import export_checkpoint
    from arl.model.checkpoint.store import MANIFEST_FILE

    if not os.path.isfile(os.path.join(path, MANIFEST_FILE)):
        raise UserError(f"{path} is a model folder already, not a checkpoint")
    out = export_checkpoint(path, out_dir, dtype)
    return (f"exported {path} to {out} ({dtype}); load it with "
            f"AutoModelForCausalLM.from_pretrained({str(out)!r})")
