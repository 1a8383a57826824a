"""The `latest` pointer of a checkpoints directory: one line naming the newest checkpoint.

The learner writes it last, after the checkpoint's atomic rename, by an atomic replace, so
it only ever names a complete checkpoint. Readers treat it as a hint and never follow it
outside its own directory.
"""

from __future__ import annotations

import os
from pathlib import Path

LATEST_FILE = "latest"


def read_latest(directory: str | os.PathLike) -> Path | None:
    """The checkpoint that `directory/latest` names, or None if there is no usable pointer
    (absent, unreadable, or naming something other than a direct child directory)."""
    try:
        name = (Path(directory) / LATEST_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not name or Path(name).name != name or name in (".", ".."):
        return None
    target = Path(directory) / name
    return target if target.is_dir() else None


def write_latest(directory: str | os.PathLike, name: str) -> None:
    """Atomically point `directory/latest` at its child `name` (fsync'd, then renamed)."""
    directory = Path(directory)
    tmp = directory / f".{LATEST_FILE}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(name + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, directory / LATEST_FILE)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
