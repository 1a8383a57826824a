"""Stopping a run cleanly: SIGTERM (`ray job stop`, `kill`) and Ctrl-C let the current step
finish, then the driver saves a checkpoint and stops; a second Ctrl-C stops at once."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any


class Stopped(RuntimeError):
    """The run was asked to stop (SIGTERM, Ctrl-C) and saved a checkpoint first. `signum`
    is the signal (the command exits with 128 + signum)."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


class StopOnSignal:
    """Turns SIGTERM and the first SIGINT (Ctrl-C) into a flag checked between steps; a
    second SIGINT stops at once (KeyboardInterrupt). Only the main thread can install
    handlers; elsewhere the signals keep theirs. Restores the handlers on exit."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name if self.signum is not None else ""

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def install(self) -> None:
        """Take the signals back (starting Ray sets a SIGTERM handler of its own); the
        handlers restored on exit stay those from before `__enter__`."""
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                signal.signal(s, self._handle)

    def _handle(self, signum: int, _frame: Any) -> None:
        if signum == signal.SIGINT and self.signum == signal.SIGINT:
            raise KeyboardInterrupt  # the second Ctrl-C: stop now, without a checkpoint
        if self.signum is None:
            self.signum = signum
            if signum == signal.SIGINT:
                print("\narl: finishing this step, then saving a checkpoint "
                      "(Ctrl-C again to stop at once)", file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
