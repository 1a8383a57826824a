"""Where a run's weights start: `model.path` as a local HF model folder that every worker loads.

Besides what `learner.gguf.prepare_model` takes (a model folder, `cache:<name>`, a GGUF file,
`pkg:<dist>/<file>`, `hf:owner/name@revision`), `model.path` may name an arl checkpoint, or
a run directory or its `checkpoints/` folder (their newest checkpoint): a run then starts
from another run's policy, as full games start from the demo's (configs/tictactoe_board.yaml). The
checkpoint is exported once (learner/export.py, its hashes verified first) into
$ARL_HOME/models/checkpoints/<run>-<step>-<digest>, named after the sha256 of its manifest
(which holds every file's hash), so a later run, the doctor and the plan reuse the folder.
"""

from __future__ import annotations

import os

from arl.app.run import checkpoint_under
from arl.learner.checkpoint import MANIFEST_FILE, sha256_file
from arl.model_path import cache_dir, local_path

CHECKPOINT_MODELS = "checkpoints"  # under $ARL_HOME/models


def starting_model(path: str) -> str:
    """A local HF model folder (absolute) for `model.path` (see the module docstring)."""
    from arl.learner.gguf import prepare_model

    checkpoint = checkpoint_in(path)
    return exported(checkpoint) if checkpoint else prepare_model(path)


def checkpoint_in(path: str) -> str | None:
    """The arl checkpoint `path` names (itself, or the newest in a run directory or its
    `checkpoints/`), or None if it names none (a model folder, a file, a hub model, ...)."""
    try:
        folder = local_path(path)  # cache:<name> as its folder; any other path as it is
    except ValueError:
        return None  # not a name in the cache: prepare_model says what is wrong
    return checkpoint_under(folder) if os.path.isdir(folder) else None


def exported(checkpoint: str) -> str:
    """The HF model folder of `checkpoint` in the cache, exported there on first use."""
    from arl.learner.export import export_checkpoint

    checkpoint = os.path.abspath(checkpoint)
    run = os.path.basename(os.path.dirname(os.path.dirname(checkpoint))) or "run"
    digest = sha256_file(os.path.join(checkpoint, MANIFEST_FILE))[:12]
    target = cache_dir(CHECKPOINT_MODELS, f"{run}-{os.path.basename(checkpoint)}-{digest}")
    if not os.path.isfile(os.path.join(target, "config.json")):
        export_checkpoint(checkpoint, target)  # atomic: the folder appears complete or not
    return target
