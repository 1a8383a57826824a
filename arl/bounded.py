"""Calls into code arl does not control (an env's reset and step) with a time limit each.

An env that never answers must not stop every other episode of a collect. `BoundedCalls.run`
hands a batch of calls to a helper thread, which makes them one after another, and waits
for the batch; a call still running when its time is up is abandoned with its thread (a
daemon: it never keeps the process alive), and the calls after it go on on a fresh thread.
One batch costs one hand-over between threads, not one a call.

Python cannot stop a thread: an abandoned call that spins goes on using a core until the
process ends (callers count the episodes they end this way: `rollout/timed_out_episodes`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

POLL_S = 0.5  # how often a waiting caller looks at the running call's clock


class CallTimedOut(Exception):
    """A bounded call did not return within its time."""


@dataclass
class Outcome:
    """One call's result: its value or the exception it raised (CallTimedOut if it ran out
    of time), and the seconds it ran."""

    value: Any = None
    error: BaseException | None = None
    seconds: float = 0.0


class _Batch:
    """The calls of one `run`, worked through by helper threads, one at a time."""

    def __init__(self, calls: Sequence[Callable[[], Any]]):
        self.calls = calls
        self.outcomes = [Outcome() for _ in calls]
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.next = 0  # the first call no thread has started
        self.running: tuple[int, float, int] | None = None  # (index, start, thread id)

    def serve(self, ident: int) -> None:
        """A helper thread: make calls until none is left or this thread is given up."""
        while True:
            with self.lock:
                if self.next >= len(self.calls) or (self.running and self.running[2] != ident):
                    if self.next >= len(self.calls) and self.running is None:
                        self.done.set()
                    return
                index, self.next = self.next, self.next + 1
                self.running = (index, time.monotonic(), ident)
            outcome = Outcome()
            try:
                outcome.value = self.calls[index]()
            except BaseException as err:  # handed to the caller, who decides
                outcome.error = err
            with self.lock:
                if self.running is None or self.running[2] != ident:
                    return  # given up on: the outcome was written as a timeout already
                outcome.seconds = time.monotonic() - self.running[1]
                self.outcomes[index], self.running = outcome, None


class BoundedCalls:
    """Runs batches of calls, each call within its own limit (see the module docstring)."""

    def __init__(self) -> None:
        self._threads = 0

    def run(self, calls: Sequence[Callable[[], Any]],
            limits: Sequence[float | None]) -> list[Outcome]:
        """The outcome of each call, in order; `limits[i]`: the seconds call i may take
        (None: no limit)."""
        if not calls:
            return []
        if all(limit is None for limit in limits):
            return [_here(call) for call in calls]
        batch = _Batch(calls)
        self._start(batch)
        while not batch.done.wait(POLL_S if batch.running is None else max(0.0, min(
                POLL_S, _left(batch, limits)))):
            with batch.lock:
                if batch.running is None or _left(batch, limits) > 0:
                    continue
                index, start, _ = batch.running
                batch.outcomes[index] = Outcome(error=CallTimedOut(),
                                                seconds=time.monotonic() - start)
                batch.running = None
                if batch.next >= len(calls):
                    batch.done.set()
                    break
            self._start(batch)  # the rest go on without the late call's thread
        return batch.outcomes

    def _start(self, batch: _Batch) -> None:
        self._threads += 1
        ident = self._threads
        threading.Thread(target=batch.serve, args=(ident,), daemon=True,
                         name=f"arl-env-calls-{ident}").start()


def _left(batch: _Batch, limits: Sequence[float | None]) -> float:
    """Seconds the running call has left (inf: no limit, or none running)."""
    running = batch.running
    if running is None or limits[running[0]] is None:
        return float("inf")
    return running[1] + limits[running[0]] - time.monotonic()


def _here(call: Callable[[], Any]) -> Outcome:
    start = time.monotonic()
    try:
        return Outcome(value=call(), seconds=time.monotonic() - start)
    except Exception as err:
        return Outcome(error=err, seconds=time.monotonic() - start)
