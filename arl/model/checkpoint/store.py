"""Learner checkpoints without pickle: safetensors for tensors, JSON for everything else.

A checkpoint is one directory:

    model.safetensors      parameters by HF name (tied weights stored once, under the name
                           `named_parameters()` gives them)
    optimizer.safetensors  every tensor of the torch optimizer state, as `state.<index>.<key>`
    optimizer.json         the optimizer's param_groups and any non-tensor per-parameter values
    learner.json           version (learner steps done, which is also the LR-schedule position:
                           the schedule is a pure function of it), skipped_steps, extra_json
    hf/                    the model folder without its weights: config.json, tokenizer and
                           chat template files, so the checkpoint alone is a model that
                           `arl eval` or `arl export` can load from anywhere (format 2)
    policies/v<n>.safetensors  (deterministic async runs only) the older weight versions the
                           next steps' rollouts play, by HF name, as the rollout workers got them
    manifest.json          format, step, policy_version, and sha256 + size of every file above

and next to it, in the parent directory, `latest`: the name of the newest checkpoint, replaced
atomically once that checkpoint is complete (written last).

A checkpoint is data, whoever wrote it. Nothing is ever unpickled or imported: a checkpoint
from an untrusted place can at worst fail to load. Only the files its manifest lists are
read, each as a regular file inside the checkpoint (never through a symbolic link), and each
checked against its sha256 first: `load_checkpoint` before reading any tensor,
`model_files` and `recorded_config` on the very bytes they return. What a checkpoint's JSON
says of its run (the config) is the author's claim: `recorded_config` returns it as plain
data, and callers never import code it names (`arl.config.recorded_env`).

Writes are atomic: the files go to a temporary sibling directory, each is fsync'd, and the
directory is renamed into place (then its parent fsync'd), so a crash leaves either no
checkpoint or a whole one.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load_file as load_numpy
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import load_file, save_file
from torch import Tensor

from arl.errors import shown
from arl.model.checkpoint.files import (  # noqa: F401 (CheckpointError, sha256_file: callers')
    MANIFEST_FILE,
    CheckpointError,
    fsync_dir,
    fsync_file,
    json_of,
    read_json,
    read_verified,
    sha256_file,
    verify_file,
    write_json,
)
from arl.model.checkpoint.pointer import write_latest

FORMAT = 2
READABLE_FORMATS = (1, 2)  # format 1: no hf/ folder (the model is the run's model.path)
HF_DIR = "hf"
MODEL_FILE = "model.safetensors"
OPTIMIZER_TENSORS_FILE = "optimizer.safetensors"
OPTIMIZER_JSON_FILE = "optimizer.json"
LEARNER_FILE = "learner.json"
POLICIES_DIR = "policies"
DATA_FILES = (MODEL_FILE, OPTIMIZER_TENSORS_FILE, OPTIMIZER_JSON_FILE, LEARNER_FILE)


@dataclass(frozen=True)
class LearnerState:
    """Everything a learner needs to continue exactly where it stopped.

    model          parameter name -> tensor (the learner's fp32 master weights)
    optimizer      a torch optimizer `state_dict()`: {"state": {int: {str: Tensor | number}},
                   "param_groups": [dict of JSON values]}
    version        learner steps done
    skipped_steps  optimizer steps skipped for non-finite values, over the whole run
    skipped_in_row those skipped since the last applied one (the abort counter)
    """

    model: dict[str, Tensor]
    optimizer: dict[str, Any]
    version: int
    skipped_steps: int
    skipped_in_row: int = 0


@dataclass(frozen=True)
class Checkpoint:
    """What `load_checkpoint` returns: the learner state, the caller's step and its JSON."""

    state: LearnerState
    step: int
    extra_json: dict[str, Any]


def save_checkpoint(
    directory: str | os.PathLike, state: LearnerState, step: int, extra_json: dict[str, Any],
    model_files: dict[str, bytes] | None = None,
    policies: dict[int, dict[str, np.ndarray]] | None = None,
) -> Path:
    """Write `state` as a checkpoint at `directory` (which must not exist yet), then point
    the parent's `latest` file at it, and return it. `model_files` (file name -> bytes: the
    model folder's config and tokenizer files, `model_folder_files`) go into hf/;
    `policies` (version -> weights) into policies/ (`load_policies`).

    `extra_json` must be JSON-serialisable (e.g. the run config, rollout RNG seeds). Raises
    FileExistsError if `directory` exists; TypeError or ValueError if anything meant for
    JSON is not JSON (NaN included).
    """
    target = Path(directory).absolute()
    if target.exists():
        raise FileExistsError(f"checkpoint directory {target} already exists")
    target.parent.mkdir(parents=True, exist_ok=True)
    opt_tensors, opt_json = _flatten_optimizer(state.optimizer)
    learner_json = {
        "version": state.version, "skipped_steps": state.skipped_steps,
        "skipped_in_row": state.skipped_in_row, "extra": extra_json,
    }
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.tmp-"))
    try:
        model = {name: t.detach().contiguous() for name, t in state.model.items()}
        save_file(model, str(tmp / MODEL_FILE))
        save_file(opt_tensors, str(tmp / OPTIMIZER_TENSORS_FILE))
        write_json(tmp / OPTIMIZER_JSON_FILE, opt_json)
        write_json(tmp / LEARNER_FILE, learner_json)
        extra_files = []
        if model_files:
            (tmp / HF_DIR).mkdir()
            for name, data in sorted(model_files.items()):
                _require_plain_name(name)
                (tmp / HF_DIR / name).write_bytes(data)
                extra_files.append(f"{HF_DIR}/{name}")
            fsync_dir(tmp / HF_DIR)
        extra_files += _write_policies(tmp, policies or {})
        files = {}
        for name in (*DATA_FILES, *extra_files):
            fsync_file(tmp / name)
            files[name] = {"sha256": sha256_file(tmp / name), "bytes": (tmp / name).stat().st_size}
        manifest = {
            "format": FORMAT, "step": step, "policy_version": state.version, "files": files,
        }
        write_json(tmp / MANIFEST_FILE, manifest)
        fsync_file(tmp / MANIFEST_FILE)
        fsync_dir(tmp)
        os.rename(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_dir(target.parent)
    write_latest(target.parent, target.name)
    return target


def load_checkpoint(directory: str | os.PathLike) -> Checkpoint:
    """Verify every file's sha256 against the manifest, then read the checkpoint.

    Raises CheckpointError naming the file for a missing directory or file, a size or hash
    mismatch (tampering, truncation), unknown format, or contents that do not parse.
    """
    root = Path(directory)
    manifest = verify_checkpoint(root)
    opt_json = json_of(root, OPTIMIZER_JSON_FILE, manifest)
    learner_json = json_of(root, LEARNER_FILE, manifest)
    try:
        model = load_file(str(root / MODEL_FILE))
        opt_tensors = load_file(str(root / OPTIMIZER_TENSORS_FILE))
        optimizer = _unflatten_optimizer(opt_tensors, opt_json)
        state = LearnerState(
            model=model,
            optimizer=optimizer,
            version=int(learner_json["version"]),
            skipped_steps=int(learner_json["skipped_steps"]),
            skipped_in_row=int(learner_json.get("skipped_in_row", 0)),
        )
        return Checkpoint(state=state, step=int(manifest["step"]), extra_json=learner_json["extra"])
    except (KeyError, ValueError, TypeError) as err:
        raise CheckpointError(f"{root}: checkpoint contents do not parse: {err!r}") from err


def _write_policies(root: Path, policies: dict[int, dict[str, np.ndarray]]) -> list[str]:
    """policies/v<n>.safetensors under `root`, one per version; their names."""
    names = []
    for version, weights in sorted(policies.items()):
        (root / POLICIES_DIR).mkdir(exist_ok=True)
        name = f"{POLICIES_DIR}/v{int(version)}.safetensors"
        save_numpy({k: np.ascontiguousarray(v) for k, v in weights.items()}, str(root / name))
        names.append(name)
    if names:
        fsync_dir(root / POLICIES_DIR)
    return names


def load_policies(directory: str | os.PathLike) -> dict[int, dict[str, np.ndarray]]:
    """The older weight versions a checkpoint keeps (policies/, maybe none), each file
    checked against the manifest first. Raises CheckpointError."""
    root = Path(directory)
    manifest = read_manifest(root)
    out = {}
    for name, meta in manifest["files"].items():
        stem = name.removeprefix(f"{POLICIES_DIR}/v").removesuffix(".safetensors")
        if name.startswith(f"{POLICIES_DIR}/") and stem.isdigit():
            verify_file(root / name, meta, root)
            out[int(stem)] = load_numpy(str(root / name))
    return out


def verify_checkpoint(directory: str | os.PathLike) -> dict[str, Any]:
    """Check that every file the manifest lists is there with its size and sha256; return
    the manifest. Raises CheckpointError naming the first bad file."""
    root = Path(directory)
    manifest = read_manifest(root)
    for name, meta in manifest["files"].items():
        verify_file(root / name, meta, root)
    return manifest


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of the checkpoint at `root`, checked for its format and file list
    (files are not read). Raises CheckpointError."""
    if not root.is_dir():
        raise CheckpointError(f"no checkpoint at {root}")
    manifest = read_json(root, MANIFEST_FILE)
    if (manifest.get("format") not in READABLE_FORMATS
            or not isinstance(manifest.get("files"), dict)):
        raise CheckpointError(f"{root / MANIFEST_FILE}: not a checkpoint manifest of format "
                              f"{' or '.join(map(str, READABLE_FORMATS))}")
    names = set(manifest["files"])
    if not all(isinstance(m, dict) and isinstance(m.get("bytes"), int)
               and isinstance(m.get("sha256"), str) for m in manifest["files"].values()):
        raise CheckpointError(f"{root / MANIFEST_FILE}: every file needs its bytes and sha256")
    extra = names - set(DATA_FILES)
    if not set(DATA_FILES) <= names or not all(
            (n.startswith(f"{HF_DIR}/") and _is_plain_name(n[len(HF_DIR) + 1:]))
            or re.fullmatch(rf"{POLICIES_DIR}/v[0-9]+\.safetensors", n) for n in extra):
        raise CheckpointError(
            f"{root / MANIFEST_FILE}: lists {shown(sorted(names), 300)}, expected "
            f"{list(DATA_FILES)}, plain file names under {HF_DIR}/ and "
            f"{POLICIES_DIR}/v<n>.safetensors"
        )
    return manifest


def manifest_digest(root: str | os.PathLike) -> str:
    """The sha256 of a checkpoint's manifest, which holds every file's hash: a name for the
    checkpoint's contents (what a cache of its exports is keyed by)."""
    return sha256_file(Path(root) / MANIFEST_FILE)


def model_files(root: str | os.PathLike) -> dict[str, bytes]:
    """The model folder files of a checkpoint's hf/ (config, tokenizer, chat template: no
    weights), file name -> bytes, each read once and checked against the manifest's sha256.
    Raises CheckpointError for a checkpoint without them (format 1) or a bad file."""
    root = Path(root)
    manifest = read_manifest(root)
    prefix = f"{HF_DIR}/"
    files = {name[len(prefix):]: read_verified(root, name, meta)
             for name, meta in sorted(manifest["files"].items())
             if name.startswith(prefix) and not name.endswith(_CODE_SUFFIXES)}
    if "config.json" not in files:
        raise CheckpointError(f"checkpoint {root} carries no model config ({HF_DIR}/config.json"
                              "): it was written by an arl older than checkpoint format 2")
    return files


def recorded_config(root: str | os.PathLike) -> dict[str, Any]:
    """The run config a checkpoint's learner.json records (JSON as written, {} if none),
    read once and checked against the manifest. Data only: nothing it names is imported."""
    root = Path(root)
    learner_json = json_of(root, LEARNER_FILE, read_manifest(root))
    extra = learner_json.get("extra")
    config = extra.get("config") if isinstance(extra, dict) else None
    return config if isinstance(config, dict) else {}


# Weights and other large artefacts never travel in hf/: the checkpoint's own
# model.safetensors holds the weights.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".ckpt",
                    ".onnx", ".index.json")
# Nor does code: a model folder's Python files run only with trust_remote_code, which arl
# never sets; a checkpoint carries none and an export writes none.
_CODE_SUFFIXES = (".py", ".pyc", ".so")
MODEL_FILE_MAX_BYTES = 64 * 2**20


def model_folder_files(path: str | os.PathLike) -> dict[str, bytes]:
    """The files of a HF model folder that describe it without its weights (config,
    generation config, tokenizer, chat template): every plain file at its top level but the
    weight files and hidden files, each at most 64 MiB."""
    out = {}
    for entry in sorted(Path(path).iterdir()):
        if (entry.is_file() and not entry.name.startswith(".")
                and not entry.name.endswith(_WEIGHT_SUFFIXES + _CODE_SUFFIXES)
                and entry.stat().st_size <= MODEL_FILE_MAX_BYTES):
            out[entry.name] = entry.read_bytes()
    return out


def _is_plain_name(name: str) -> bool:
    """A file name without a folder, not hidden, printable."""
    return (bool(name) and "/" not in name and "\\" not in name and not name.startswith(".")
            and name == Path(name).name and name.isprintable())


def _require_plain_name(name: str) -> None:
    if not _is_plain_name(name):
        raise ValueError(f"model file name {name!r} must be a plain file name")


def _flatten_optimizer(state_dict: dict[str, Any]) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """torch optimizer state_dict -> (tensors for safetensors, JSON-ready rest)."""
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, Any] = {}
    for index, entry in state_dict["state"].items():
        for key, value in entry.items():
            name = f"state.{int(index)}.{key}"
            if isinstance(value, Tensor):
                tensors[name] = value.detach().contiguous()
            else:
                scalars[name] = value
    return tensors, {"param_groups": state_dict["param_groups"], "scalars": scalars}


def _unflatten_optimizer(tensors: dict[str, Tensor], rest: dict[str, Any]) -> dict[str, Any]:
    """Inverse of `_flatten_optimizer`. JSON has no tuples, so list-valued hyperparameters
    (AdamW's betas) become tuples again, as torch stores them."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in [*tensors.items(), *rest["scalars"].items()]:
        prefix, index, key = name.split(".", 2)
        if prefix != "state":
            raise ValueError(f"unexpected optimizer entry {name!r}")
        state.setdefault(int(index), {})[key] = value
    groups = [
        {k: tuple(v) if isinstance(v, list) and k != "params" else v for k, v in group.items()}
        for group in rest["param_groups"]
    ]
    return {"state": dict(sorted(state.items())), "param_groups": groups}


