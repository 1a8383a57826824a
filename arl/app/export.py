"""`arl export CHECKPOINT OUT_DIR`: a checkpoint as a standard Hugging Face model folder."""

from __future__ import annotations

from arl.errors import UserError
from arl.model.checkpoint.runs import is_checkpoint, resolve_checkpoint


def export(checkpoint: str, out_dir: str, dtype: str = "float32") -> str:
    """Export the checkpoint `checkpoint` names (a run dir, checkpoints/latest, step_<n>)
    to `out_dir`; return a line saying where it went and how to load it."""
    path = resolve_checkpoint(checkpoint)
    from arl.model.checkpoint.export import export_checkpoint

    if not is_checkpoint(path):
        raise UserError(f"{path} is a model folder already, not a checkpoint")
    out = export_checkpoint(path, out_dir, dtype)
    return (f"exported {path} to {out} ({dtype}); load it with "
            f"AutoModelForCausalLM.from_pretrained({str(out)!r})")
