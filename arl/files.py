"""What arl does to files: it replaces or clears only folders it made, writes files whole or
not at all, and names contents by their sha256.

Folders arl made, and the rule that it replaces or clears no other.

Every folder arl may later replace, clear or move aside (a warm start's output, an export, a
run directory) carries a marker file, `.arl-folder`, that arl wrote when it made the folder
(JSON: which kind of folder it is). Before arl replaces a folder that exists, it checks the
marker: a folder without one is refused with one line naming it, whatever it holds, so that
a mistyped path never costs anyone their files. An empty folder holds nothing to lose and
passes.

Folders written before markers existed are recognised by what they always held (`LEGACY`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os

from arl.errors import UserError

MARKER = ".arl-folder"
# kind -> files whose presence together marks a folder arl made before markers existed
LEGACY: dict[str, tuple[str, ...]] = {
    "warmstart": ("warmstart.json", "config.json"),
    "run": ("config.json", "metrics.jsonl"),
}


class NotOurs(UserError):
    """arl was asked to replace or clear a folder it did not make."""


def mark(path: str | os.PathLike, kind: str) -> None:
    """Write the marker of a `kind` folder into `path` (a folder being made by arl)."""
    with open(os.path.join(path, MARKER), "w", encoding="utf-8") as f:
        json.dump({"kind": kind}, f)


def is_ours(path: str | os.PathLike, kind: str) -> bool:
    """Whether the folder at `path` is one arl made as a `kind` folder (its marker, or the
    files such a folder held before markers)."""
    marker = os.path.join(path, MARKER)
    if os.path.isfile(marker) and not os.path.islink(marker):
        try:
            with open(marker, encoding="utf-8") as f:
                return json.load(f).get("kind") == kind
        except (OSError, ValueError, AttributeError):
            return False
    legacy = LEGACY.get(kind)
    return bool(legacy) and all(os.path.isfile(os.path.join(path, n)) for n in legacy)


def require_ours(path: str | os.PathLike, kind: str, key: str) -> None:
    """Raise NotOurs, naming `path` and the setting `key` that chose it, when a folder (or
    anything else) is at `path` that arl did not make as a `kind` folder and would lose
    something if replaced. Nothing there, or an empty folder: no error."""
    path = os.fspath(path)
    if not os.path.lexists(path):
        return
    if os.path.isdir(path) and not os.path.islink(path):
        if not os.listdir(path) or is_ours(path, kind):
            return
    raise NotOurs(f"{path} ({key}) is not a {kind} folder arl made (no {MARKER} marker in "
                  "it): arl replaces only its own folders; choose another path or move it "
                  "away yourself")


def write_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` by a rename, so a reader (or a crash) never meets half of it."""
    path = os.fspath(path)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
