"""Lock-step sampling rounds across the env-runner actors of one rollout worker's collect.

A rollout worker with env runners (`rollout.env_actors`) splits its share of a step's groups
into contiguous parts, one per runner. Each runner plays its part turn by turn and asks the
worker for each turn's completions (`request`). A round is sampled when every part still
playing has asked (parts that finished have `leave`n): the prompts go to the engine in one
call, part by part in order, so the batch is exactly the one the worker's own episode loop
would have sampled, with the same seed. The runners' episodes are therefore the same as
without runners, whatever their timing. Requests come from Ray's threads of the worker
(a concurrency group of its own); the engine runs in the thread that completes a round.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from arl.types import Generation, SamplingParams


class RoundAborted(RuntimeError):
    """The collect this request belongs to was abandoned (a runner died, or a new collect
    began)."""


@dataclass
class _Call:
    live: set[int]
    waiting: dict[int, tuple[Sequence[Sequence[int]], SamplingParams]] = field(
        default_factory=dict)
    results: dict[int, Any] = field(default_factory=dict)  # part -> generations or error
    aborted: bool = False


class RoundBarrier:
    """One collect's rounds at a time (`open` starts the next; see the module docstring)."""

    def __init__(self, generate: Callable[[list, SamplingParams], list[Generation]]):
        self.generate = generate
        # Held while the engine samples a round: whoever else uses the engine (a weight
        # load, an evaluation, closing) takes it too, so that a round of an abandoned collect
        # still running never overlaps anything.
        self.engine_lock = threading.Lock()
        self._cond = threading.Condition()
        self._id: int | None = None
        self._call: _Call | None = None

    def open(self, call_id: int, parts: int) -> None:
        """Start collect `call_id` with `parts` runners; any earlier one is aborted."""
        with self._cond:
            if self._call is not None:
                self._call.aborted = True
            self._id, self._call = call_id, _Call(live=set(range(parts)))
            self._cond.notify_all()

    def abort(self, call_id: int) -> None:
        """Abandon collect `call_id`: its waiting and later requests raise RoundAborted."""
        with self._cond:
            if self._id == call_id and self._call is not None:
                self._call.aborted = True
                self._cond.notify_all()

    def request(self, call_id: int, part: int, prompts: Sequence[Sequence[int]],
                params: SamplingParams) -> list[Generation]:
        """This round's generations for `part`'s prompts, once every live part has asked."""
        with self._cond:
            call = self._current(call_id)
            if part not in call.live or part in call.waiting:
                raise RuntimeError(f"part {part} of collect {call_id} asked out of turn")
            call.waiting[part] = (prompts, params)
        self._run_if_complete(call)
        with self._cond:
            self._cond.wait_for(lambda: part in call.results or call.aborted)
            if part not in call.results:
                raise RoundAborted(f"collect {call_id} was abandoned")
            result = call.results.pop(part)
        if isinstance(result, BaseException):
            raise result
        return result

    def stragglers(self, call_id: int) -> list[int]:
        """The live parts of collect `call_id` not waiting for a round: with a round due,
        the ones everyone waits for."""
        with self._cond:
            if self._id != call_id or self._call is None:
                return []
            return sorted(self._call.live - set(self._call.waiting))

    def leave(self, call_id: int, part: int) -> None:
        """`part` has no more requests in collect `call_id` (its episodes ended)."""
        with self._cond:
            if self._id != call_id or self._call is None:
                return
            call = self._call
            call.live.discard(part)
        self._run_if_complete(call)

    def _current(self, call_id: int) -> _Call:
        if self._id != call_id or self._call is None or self._call.aborted:
            raise RoundAborted(f"collect {call_id} is not the current one")
        return self._call

    def _run_if_complete(self, call: _Call) -> None:
        """Sample the round if every live part waits (in this thread, outside the lock)."""
        with self._cond:
            if call.aborted or not call.waiting or set(call.waiting) != call.live:
                return
            order = sorted(call.waiting)
            batch = [call.waiting.pop(p) for p in order]
        params = batch[0][1]
        try:
            if any(p != params for _, p in batch):
                raise RuntimeError("the parts of one round asked with different settings")
            prompts = [list(p) for part_prompts, _ in batch for p in part_prompts]
            with self.engine_lock:
                generations = self.generate(prompts, params)
            results, start = {}, 0
            for part, (part_prompts, _) in zip(order, batch, strict=True):
                results[part] = generations[start: start + len(part_prompts)]
                start += len(part_prompts)
        except Exception as err:  # every waiting part sees the engine's failure
            results = {part: err for part in order}
        with self._cond:
            call.results.update(results)
            self._cond.notify_all()
