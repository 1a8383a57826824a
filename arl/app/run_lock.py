"""One writer per run directory: an OS lock that `arl train` holds for the whole run.

The lock is `flock` on a file beside the run directory, `<output_dir>/.<run_name>.lock`
(beside, not inside: a new run moves the old directory aside, and the lock must not move
with it). The kernel releases it when its process ends, however it ends, so a lock left by a
dead process is taken over by the next run without anyone deleting anything; the file itself
is never deleted (a deleted lock file lets two processes lock two different files). The
holder writes its pid and host into the file, so that a second run can say who holds it.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import socket

from arl.errors import UserError

log = logging.getLogger(__name__)


class RunDirBusy(UserError):
    """Another process is writing the run directory (exit status 2)."""


def lock_path(run_dir: str) -> str:
    """The lock file of the run directory `run_dir`."""
    parent, name = os.path.split(os.path.abspath(run_dir))
    return os.path.join(parent, f".{name}.lock")


class RunLock:
    """Context manager: hold the lock of `run_dir`, or raise RunDirBusy naming the holder."""

    def __init__(self, run_dir: str):
        self.run_dir = os.path.abspath(run_dir)
        self.path = lock_path(run_dir)
        self._fd: int | None = None

    def __enter__(self) -> RunLock:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunDirBusy(f"run directory {self.run_dir} is in use by another run "
                             f"({holder}); wait for it to end, or choose another run_name"
                             ) from None
        previous = _holder(fd)
        if previous != "unknown":  # it ended without unlocking: its process is gone
            log.info("run directory %s: taking over the lock of %s, which has ended",
                     self.run_dir, previous)
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode(),
                  0)
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is None:
            return
        os.ftruncate(self._fd, 0)  # an unlocked file names nobody
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


def _holder(fd: int) -> str:
    """Who the lock file says holds it ("pid N on HOST"), or "unknown"."""
    try:
        record = json.loads(os.pread(fd, 4096, 0) or b"{}")
        return f"pid {int(record['pid'])} on {str(record['host'])[:64]}"
    except (OSError, ValueError, KeyError, TypeError):
        return "unknown"
