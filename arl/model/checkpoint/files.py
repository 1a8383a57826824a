"""The bytes of checkpoint files: read once, never through a symbolic link, checked against
the manifest's size and sha256; written as JSON any parser reads; fsync'd.

arl/model/checkpoint/store.py owns the checkpoint format and is the module callers use; this is
its file layer.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from arl.errors import UserError
from arl.files import sha256_file

MANIFEST_FILE = "manifest.json"


class CheckpointError(UserError, ValueError):
    """A checkpoint directory is missing, incomplete, tampered with or not in this format."""


def read_verified(root: Path, name: str, meta: dict[str, Any]) -> bytes:
    """The bytes of the checkpoint file `name`, read once through a descriptor that refuses
    symbolic links, and checked against its manifest entry `meta` (size, sha256)."""
    path = inside(root, name)
    data = _read_regular(path, int(meta.get("bytes", 0)) + 1)
    check_bytes(path, len(data), hashlib.sha256(data).hexdigest(), meta)
    return data


def _read_regular(path: Path, limit: int) -> bytes:
    """At most `limit` bytes of the regular file at `path`, opened without following a
    symbolic link; CheckpointError if it is anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as err:
        raise CheckpointError(f"checkpoint file {path} cannot be read as a regular file "
                              f"({err.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise CheckpointError(f"checkpoint file {path} is not a regular file")
        return handle.read(limit)


def inside(root: Path, name: str) -> Path:
    """root/name, where no part of the way (hf/ included) is a symbolic link: a checkpoint's
    files are its own, never files elsewhere that a link points at."""
    path = root / name
    for part in (*reversed(path.relative_to(root).parents[:-1]), path.relative_to(root)):
        if (root / part).is_symlink():
            raise CheckpointError(f"checkpoint file {root / part} is a symbolic link; a "
                                  "checkpoint's files must be its own")
    return path


def verify_file(path: Path, meta: dict[str, Any], root: Path | None = None) -> None:
    if root is not None:
        inside(root, str(path.relative_to(root)))
    if not path.is_file() or path.is_symlink():
        raise CheckpointError(f"checkpoint file {path} is missing or not a regular file")
    check_bytes(path, path.stat().st_size, None, meta)
    check_bytes(path, meta.get("bytes"), sha256_file(path), meta)


def check_bytes(path: Path, size: Any, digest: str | None, meta: dict[str, Any]) -> None:
    """CheckpointError unless `size` (and `digest`, where given) match the manifest entry."""
    if size != meta.get("bytes"):
        raise CheckpointError(
            f"checkpoint file {path} has {size} bytes, manifest says {meta.get('bytes')} "
            "(truncated or modified)"
        )
    if digest is not None and digest != meta.get("sha256"):
        raise CheckpointError(
            f"checkpoint file {path} fails its sha256 check (modified or corrupt): "
            f"expected {meta.get('sha256')}, got {digest}"
        )


def json_of(root: Path, name: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint JSON file as an object, from the verified bytes the manifest lists."""
    meta = manifest["files"].get(name)
    if not isinstance(meta, dict):
        raise CheckpointError(f"{root / MANIFEST_FILE} does not list {name}")
    try:
        value = json.loads(read_verified(root, name, meta).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise CheckpointError(f"checkpoint file {root / name} is not valid JSON: {err}"
                              ) from None
    if not isinstance(value, dict):
        raise CheckpointError(f"checkpoint file {root / name} must hold a JSON object")
    return value


MANIFEST_MAX_BYTES = 16 * 2**20


def read_json(root: Path, name: str) -> dict[str, Any]:
    path = root / name
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing")
    data = _read_regular(path, MANIFEST_MAX_BYTES + 1)
    if len(data) > MANIFEST_MAX_BYTES:
        raise CheckpointError(f"checkpoint file {path} is larger than a manifest can be")
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as err:
        raise CheckpointError(f"checkpoint file {path} is not valid JSON: {err}") from err
    if not isinstance(value, dict):
        raise CheckpointError(f"checkpoint file {path} must hold a JSON object")
    return value


def write_json(path: Path, value: dict[str, Any]) -> None:
    # allow_nan=False: NaN is not JSON, and a checkpoint must be readable by any JSON parser.
    path.write_text(json.dumps(value, indent=1, sort_keys=True, allow_nan=False), encoding="utf-8")


def fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
