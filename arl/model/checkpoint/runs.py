"""Checkpoints among a run's files: `checkpoints/step_<n>/` folders and the `latest` pointer.

Which checkpoint a path names (a run directory, its `checkpoints/`, a `latest` file, a step
folder, a model arl built), the newest to resume from, and the upkeep of a run's
`checkpoints/` folder: setting later ones aside on resume, removing what a crash cut short,
pruning old ones. The files inside a checkpoint are arl/model/checkpoint/store.py's.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from arl.config import recorded_env
from arl.errors import UserError
from arl.model.checkpoint.pointer import LATEST_FILE, read_latest
from arl.model.checkpoint.store import (
    MANIFEST_FILE,
    CheckpointError,
    read_manifest,
    recorded_config,
    verify_checkpoint,
)
from arl.model_source import CACHE_PREFIX, local_path

log = logging.getLogger(__name__)

_STEP_DIR = re.compile(r"step_(\d+)")


def step_in_name(path: str) -> int:
    """The step a checkpoint folder's name says (`.../step_<n>`: no file is read; see
    `saved_step` for the manifest's)."""
    return int(_STEP_DIR.fullmatch(os.path.basename(os.path.normpath(path))).group(1))


def latest_checkpoint(directory: str) -> str | None:
    """The checkpoint to resume from in `directory`, or None if there is none.

    The `latest` pointer names it; a step_<n> folder newer than the pointer also counts
    (a crash can fall between a checkpoint's rename and the pointer's update). Checkpoints
    appear by an atomic rename once complete, so every step_<n> folder was complete when
    written; `load_checkpoint` still verifies its hashes before anything is loaded."""
    if not os.path.isdir(directory):
        return None
    steps = [os.path.join(directory, n) for n in step_folders(directory)]
    pointed = read_latest(directory)
    if pointed is not None and _STEP_DIR.fullmatch(pointed.name):
        steps.append(str(pointed))
    return max(steps, key=step_in_name) if steps else None


def resolve_checkpoint(path: str) -> str:
    """The checkpoint (or model folder) `path` names: a checkpoint folder, a model folder,
    a run directory or its `checkpoints/` (their newest checkpoint), a `latest` pointer
    file, or a model arl built (`cache:<name>`, e.g. cache:tiny-warmstart). Raises UserError
    saying what was found instead."""
    if path.startswith(CACHE_PREFIX):
        try:
            path = local_path(path)
        except ValueError as err:
            raise UserError(str(err)) from None
    if os.path.isfile(path) and os.path.basename(path) == LATEST_FILE:
        pointed = read_latest(os.path.dirname(path) or ".")
        if pointed is None:
            raise UserError(f"{path} names no checkpoint next to it")
        return str(pointed)
    if not os.path.isdir(path):
        raise UserError(f"no checkpoint, run directory or model folder at {path}")
    found = checkpoint_under(path)
    if found is not None:
        return found
    # A run directory has a config.json too (the run's); a model folder has weights.
    if os.path.isfile(os.path.join(path, "config.json")) and any(
            name.endswith((".safetensors", ".bin", ".gguf")) for name in os.listdir(path)):
        return path
    raise UserError(f"{path} holds no checkpoint (a run writes them to "
                    "runs/<name>/checkpoints/step_<n>) and no model (config.json)")


def checkpoint_under(folder: str) -> str | None:
    """The checkpoint `folder` is, else the newest in its `checkpoints/` or in it (a run
    directory, or a run's checkpoints/); None if there is none."""
    if os.path.isfile(os.path.join(folder, MANIFEST_FILE)):
        return folder
    for candidate in (os.path.join(folder, "checkpoints"), folder):
        found = latest_checkpoint(candidate)
        if found is not None:
            return found
    return None


def named_checkpoint(folder: str, name: str) -> str:
    """checkpoints/step_<n> for `resume=step_<n>` (any zero padding); UserError if absent."""
    step = int(name[len("step_"):])
    found = {step_in_name(n): n for n in step_folders(folder)}
    if step not in found:
        have = ", ".join(found[k] for k in sorted(found)) or "none"
        raise UserError(f"resume={name}: no checkpoint step_{step:06d} in {folder} "
                        f"(there: {have})")
    return os.path.join(folder, found[step])


def step_folders(folder: str) -> list[str]:
    """The names of the step_<n> folders in `folder` (none if it does not exist)."""
    if not os.path.isdir(folder):
        return []
    return [n for n in os.listdir(folder) if _STEP_DIR.fullmatch(n)]


def require_intact(path: str) -> None:
    """Verify the checkpoint to resume from before anything starts. A bad one raises
    CheckpointError: one line naming the bad file and the newest intact checkpoint."""
    try:
        verify_checkpoint(path)
        return
    except CheckpointError as err:
        bad = str(err)
    folder = os.path.dirname(path)
    older = sorted((n for n in step_folders(folder) if step_in_name(n) < step_in_name(
        path)), key=step_in_name, reverse=True)
    for name in older:
        try:
            verify_checkpoint(os.path.join(folder, name))
        except CheckpointError:
            continue
        raise CheckpointError(f"{bad}; the newest intact checkpoint is "
                              f"{os.path.join(folder, name)} (resume={name} continues from it)")
    raise CheckpointError(f"{bad}; no older checkpoint is intact (resume=never starts over)")


def set_aside_after(folder: str, step: int) -> None:
    """Rename the checkpoints later than `step` to step_<n>.aside[-k] (kept, never read
    again), so that the resumed run writes its own."""
    for name in step_folders(folder):
        if step_in_name(name) > step:
            target, k = os.path.join(folder, f"{name}.aside"), 1
            while os.path.exists(target):
                k += 1
                target = os.path.join(folder, f"{name}.aside-{k}")
            os.rename(os.path.join(folder, name), target)
            log.warning("resuming from step %d: %s set aside as %s", step, name, target)


def remove_partial(directory: str) -> None:
    """Delete the temp folders (and pointer files) of checkpoint writes a crash cut short."""
    for name in os.listdir(directory):
        if name.startswith(".latest.tmp-"):
            os.remove(os.path.join(directory, name))
        elif name.startswith(".step_") and ".tmp-" in name:
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def prune(folder: str, keep: int) -> list[str]:
    """Delete all but the newest `keep` checkpoints of `folder` (0: keep all); the one
    `latest` names is always kept, and a folder without a manifest is never a checkpoint to
    delete. Returns the deleted folders."""
    steps = sorted(step_folders(folder), key=step_in_name)
    pointed = read_latest(folder)
    doomed = steps[:-keep] if keep else []
    removed = []
    for name in doomed:
        path = os.path.join(folder, name)
        if (pointed is not None and pointed.name == name) or not os.path.isfile(
                os.path.join(path, MANIFEST_FILE)):
            continue
        shutil.rmtree(path)
        removed.append(path)
    return removed


def newest_up_to(folder: str, step: int) -> str | None:
    """The newest checkpoint of `folder` no later than `step`, or None."""
    steps = [n for n in step_folders(folder) if step_in_name(n) <= step]
    return os.path.join(folder, max(steps, key=step_in_name)) if steps else None


def saved_step(path: str) -> int:
    """The learner step a checkpoint was saved after, as its manifest says (any folder
    name: a checkpoint may have been copied or renamed)."""
    return int(read_manifest(Path(path))["step"])


def is_checkpoint(path: str) -> bool:
    """Whether `path` is a checkpoint folder (it holds a manifest), not a model folder."""
    return os.path.isfile(os.path.join(path, MANIFEST_FILE))


def trained_env(path: str) -> dict:
    """The env section of the run a checkpoint comes from, checked as data: only keys of an
    installed env, nothing that names code (`arl.config.recorded_env`, UserError if it
    does); {} for a model folder or a checkpoint that records none."""
    if not is_checkpoint(path):
        return {}
    env = recorded_config(path).get("env")
    return recorded_env(env, f"checkpoint {path}") if env else {}
