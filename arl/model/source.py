"""Any model reference as a local HF model folder that every engine and learner loads: the
one place where a reference becomes files.

`local_folder` takes what `arl.model_source.model_source` names (a model folder,
`cache:<name>`, a GGUF file, `pkg:<dist>/<file>`, `hf:owner/name@revision`), and also an
arl checkpoint, or a run directory or its `checkpoints/` folder (their newest checkpoint): a
run then starts from another run's policy, as full games start from the demo's
(configs/tictactoe_board.yaml). What it makes is cached under $ARL_HOME/models, so a later
run, the doctor and the plan reuse it:

- a checkpoint is exported once (arl/model/checkpoint/export.py, every file checked against
  its sha256) into `checkpoints/<run>-<step>-<digest>`, named after the sha256 of its
  manifest (which holds every file's hash);
- a GGUF file is converted once into `gguf/<name>-<sha256>` (arl/model/gguf.py);
- a hub model is downloaded once into the Hugging Face cache, at its revision.
"""

from __future__ import annotations

import os

from arl.errors import ModelUnavailable
from arl.model.checkpoint.runs import checkpoint_under
from arl.model.checkpoint.store import manifest_digest
from arl.model_source import HUB_PREFIX, cache_dir, local_path, model_source

CHECKPOINT_MODELS = "checkpoints"  # under $ARL_HOME/models


def local_folder(reference: str, cache: str | None = None) -> str:
    """A local HF model folder (absolute) for `reference` (see the module docstring); GGUF
    conversions go to `cache` (default $ARL_HOME/models/gguf). Raises ModelUnavailable, one
    line, when the reference names nothing here or the hub cannot be reached."""
    checkpoint = checkpoint_in(reference)
    if checkpoint is not None:
        return exported(checkpoint)
    source = model_source(reference)
    if source.kind == "hub":
        return _download(source.location, source.revision)
    if source.kind == "gguf":
        from arl.model.gguf import converted

        return converted(source.location, cache)
    return os.path.abspath(source.location)


def checkpoint_in(reference: str) -> str | None:
    """The arl checkpoint `reference` names (itself, or the newest in a run directory or
    its `checkpoints/`), or None if it names none (a model folder, a file, a hub model)."""
    try:
        folder = local_path(reference)  # cache:<name> as its folder; any other path as it is
    except ValueError:
        return None  # not a name in the cache: model_source says what is wrong
    return checkpoint_under(folder) if os.path.isdir(folder) else None


def exported(checkpoint: str) -> str:
    """The HF model folder of `checkpoint` in the cache, exported there on first use."""
    from arl.model.checkpoint.export import export_checkpoint

    checkpoint = os.path.abspath(checkpoint)
    run = os.path.basename(os.path.dirname(os.path.dirname(checkpoint))) or "run"
    digest = manifest_digest(checkpoint)[:12]
    target = cache_dir(CHECKPOINT_MODELS, f"{run}-{os.path.basename(checkpoint)}-{digest}")
    if not os.path.isfile(os.path.join(target, "config.json")):
        export_checkpoint(checkpoint, target)  # atomic: the folder appears complete or not
    return target


def _download(repo_id: str, revision: str) -> str:
    """The hub model's safetensors, config and tokenizer at `revision`, in the local HF
    cache (downloaded the first time; later runs find them there). Never pickled `.bin`
    weights, never its Python files."""
    from huggingface_hub import snapshot_download

    try:
        return snapshot_download(repo_id, revision=revision, allow_patterns=[
            "*.json", "*.safetensors", "*.jinja", "*.txt", "*.model", "*.tiktoken"])
    except Exception as e:  # the hub client raises many kinds: offline, 404, auth, network
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelUnavailable(
            f"model {HUB_PREFIX}{repo_id}@{revision} could not be downloaded from the hub "
            f"({reason[:160]}); give a local model folder, a .gguf file or "
            "pkg:<dist>/<file>") from None
