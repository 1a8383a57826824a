"""arl/rollout/round_barrier.py with real threads: rounds sample every live part together, in part
order, and an abort wakes every waiter."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from arl.rollout.round_barrier import RoundAborted, RoundBarrier
from arl.types import Generation, SamplingParams

PARAMS = SamplingParams(1.0, 1.0, 4, seed=0)


class _Recorder:
    """An engine that answers each prompt with its own first id and records its batches."""

    def __init__(self):
        self.batches = []

    def __call__(self, prompts, params):
        self.batches.append([p[0] for p in prompts])
        return [Generation(np.array([p[0]], dtype=np.int32), np.zeros(1, np.float32), True)
                for p in prompts]


def _part(barrier, part, rounds, out):
    for r in range(rounds):
        prompts = [[100 * part + 10 * r + i] for i in range(2)]
        out[part].append([int(g.token_ids[0]) for g in barrier.request(7, part, prompts,
                                                                        PARAMS)])
    barrier.leave(7, part)


def test_rounds_batch_every_live_part_in_order_until_each_leaves():
    engine = _Recorder()
    barrier = RoundBarrier(engine)
    barrier.open(7, parts=3)
    out = {0: [], 1: [], 2: []}
    threads = [threading.Thread(target=_part, args=(barrier, p, rounds, out))
               for p, rounds in ((2, 3), (0, 2), (1, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert engine.batches == [[0, 1, 100, 101, 200, 201], [10, 11, 210, 211], [220, 221]]
    assert out == {0: [[0, 1], [10, 11]], 1: [[100, 101]], 2: [[200, 201], [210, 211],
                                                                 [220, 221]]}


def test_abort_wakes_waiters_and_refuses_later_requests():
    barrier = RoundBarrier(_Recorder())
    barrier.open(7, parts=2)
    errors = []

    def wait():
        try:
            barrier.request(7, 0, [[1]], PARAMS)
        except RoundAborted as err:
            errors.append(err)

    waiter = threading.Thread(target=wait)
    waiter.start()
    barrier.abort(7)
    waiter.join(timeout=30)
    assert len(errors) == 1 and not waiter.is_alive()
    with pytest.raises(RoundAborted):
        barrier.request(7, 1, [[2]], PARAMS)


def test_an_engine_failure_reaches_every_part_of_the_round():
    def broken(prompts, params):
        raise ValueError("engine down")

    barrier = RoundBarrier(broken)
    barrier.open(1, parts=2)
    seen = []

    def ask(part):
        try:
            barrier.request(1, part, [[part]], PARAMS)
        except ValueError as err:
            seen.append(str(err))

    threads = [threading.Thread(target=ask, args=(p,)) for p in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert seen == ["engine down", "engine down"]
