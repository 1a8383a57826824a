"""Async rollouts: workers generate continuously while the learner trains (`mode: async`).

The rollout side works in *chunks*: chunk c is part `c % W` of step `c // W`'s start states
(W = rollout workers), exactly the share sync mode gives worker `c % W` at that step, with
the same sampling seed. Any free worker may play any chunk.

Admission control bounds staleness and memory at once: a chunk is started only while
`started - dropped < (published_version + max_staleness + 1) * W`, so at most
(max_staleness + 1) steps of chunks are ever in flight or buffered. A new weight version is
queued on every worker right after it is published; a worker loads it when its current chunk
ends (Ray runs one caller's calls to an actor in order), so it never stops the world.

The learner takes the first W chunks to complete (ordered by chunk index within the batch)
as soon as they are there. A chunk whose trajectories are more than `max_staleness` versions
behind the learner is dropped and counted. With max_staleness = 0 nothing can start before
the weights it must use are published, so the sequence of chunks, seeds and weights is
exactly sync mode's: the two modes give identical runs.

Deterministic (`deterministic: true`): step k trains on exactly the W chunks of step k, each
played with weights version max(k - max_staleness, floor) (floor: the oldest version kept
when the pipeline starts: 0, or what a checkpoint brought back), however the chunks finish.
Admission already waits until that version is published; the worker loads it just before
the chunk (arl/actors/pinned.py). Nothing is dropped, and two runs with one seed on one
machine log the same metrics; a run resumed from a checkpoint plays what the unstopped run
played.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from arl.actors.cluster import Cluster, StepCall
from arl.actors.rollout_pool import RolloutBatch, RolloutCall, worker_shares
from arl.config import Config
from arl.errors import RolloutWorkerLost
from arl.steps import start_states, transcripts_wanted
from arl.types import EpisodeSummary


@dataclass
class _Chunk:
    index: int
    call: RolloutCall
    summaries: list[EpisodeSummary] = field(default_factory=list)


@dataclass(frozen=True)
class AsyncStats:
    """What one `next_batch` saw: staleness of what it took, and what it dropped."""

    staleness: list[int]
    dropped_trajectories: int


class AsyncRollouts:
    """Keeps every rollout worker busy within the staleness bound; hands out batches, from
    step `first_step` on. It owns the chunks: which start states, seeds and transcripts a
    chunk plays (`chunk_args`), and when one starts."""

    def __init__(self, cluster: Cluster, cfg: Config, first_step: int):
        self.cluster = cluster
        self.cfg = cfg
        self.k = cfg.max_staleness
        self.workers = cluster.rollout_workers
        self.next_chunk = first_step * self.workers
        self.dropped_chunks = 0
        self.busy: dict[int, _Chunk] = {}  # worker -> its chunk in flight
        self.done: list[_Chunk] = []  # completed, not yet taken, in completion order
        self.idle_since = {w: time.perf_counter() for w in range(self.workers)}
        self.rollout_idle_s = 0.0  # summed over workers since the last `take_rollout_idle`
        self.pinned = cluster.pinned
        self.floor = min(self.pinned.versions(), default=first_step) if self.pinned else 0

    def version_for(self, step: int) -> int:
        """Deterministic: the weights version step `step`'s chunks play."""
        return max(step - self.k, self.floor)

    def _admitted(self, version: int) -> bool:
        started = self.next_chunk - self.dropped_chunks
        return started < (version + self.k + 1) * self.workers

    def feed(self, version: int) -> None:
        """Start chunks on idle workers while admission allows."""
        for w in range(self.workers):
            if w in self.busy or not self._admitted(version):
                continue
            c = self.next_chunk
            self.next_chunk += 1
            if self.pinned:
                self.pinned.hold(w, self.version_for(c // self.workers))
            self.busy[w] = _Chunk(c, self.cluster.start_rollout(w, chunk_args(self.cfg, c)))
            self.rollout_idle_s += time.perf_counter() - self.idle_since.pop(w)

    def poll(self, timeout: float | None, also: StepCall | None = None) -> bool:
        """Wait up to `timeout` s (None: no limit) for a chunk, or for `also` (a learner
        step) if given, to complete; move completed chunks to the done list. Return whether
        `also` is done. A dead worker is rebuilt (current weights) and plays its chunk again."""
        workers = list(self.busy)
        calls = [self.busy[w].call for w in workers] + ([also] if also is not None else [])
        if not calls:
            return False
        ready = self.cluster.wait(calls, timeout)
        for w in (workers[i] for i in ready if i < len(workers)):
            chunk = self.busy.pop(w)
            try:
                chunk.summaries = self.cluster.rollout_result(chunk.call)
            except RolloutWorkerLost:
                if self.pinned:
                    self.pinned.hold(w, self.version_for(chunk.index // self.workers))
                chunk.call = self.cluster.start_rollout(w, chunk.call.args)
                self.busy[w] = chunk
                continue
            self.done.append(chunk)
            self.idle_since[w] = time.perf_counter()
        return also is not None and len(workers) in ready

    def next_batch(self, learner_version: int) -> tuple[RolloutBatch, AsyncStats]:
        """The next W fresh chunks as one batch (ordered by chunk index), feeding workers
        while it waits. Chunks more than max_staleness behind `learner_version` are dropped.
        Deterministic: the W chunks of step `learner_version`, nothing dropped."""
        if self.pinned:
            return self._pinned_batch(learner_version)
        staleness, dropped = [], 0
        while True:
            fresh = []
            for chunk in self.done:
                behind = [learner_version - s.policy_version for s in chunk.summaries]
                if max(behind, default=0) > self.k:
                    dropped += len(chunk.summaries)
                    self.dropped_chunks += 1
                else:
                    fresh.append(chunk)
            self.done = fresh
            if len(self.done) >= self.workers:
                break
            self.feed(learner_version)
            self.poll(timeout=None)  # admission always lets a chunk start here (module doc)
        taken = sorted(self.done[: self.workers], key=lambda ch: ch.index)
        self.done = self.done[self.workers:]
        for chunk in taken:
            staleness += [learner_version - s.policy_version for s in chunk.summaries]
        batch = RolloutBatch([s for ch in taken for s in ch.summaries],
                             [ch.call.trajectories for ch in taken])
        return batch, AsyncStats(staleness, dropped)

    def _pinned_batch(self, step: int) -> tuple[RolloutBatch, AsyncStats]:
        # Versions older than this step's are played by no chunk still to start or replay.
        self.pinned.release(below=self.version_for(step))
        wanted = range(step * self.workers, (step + 1) * self.workers)
        while not set(wanted) <= {ch.index for ch in self.done}:
            self.feed(step)
            self.poll(timeout=None)
        taken = sorted((ch for ch in self.done if ch.index in wanted), key=lambda ch: ch.index)
        self.done = [ch for ch in self.done if ch.index not in wanted]
        staleness = [step - s.policy_version for ch in taken for s in ch.summaries]
        batch = RolloutBatch([s for ch in taken for s in ch.summaries],
                             [ch.call.trajectories for ch in taken])
        return batch, AsyncStats(staleness, 0)

    def wait_for(self, step: StepCall, version: int) -> dict[str, Any]:
        """The learner step's metrics, keeping the rollout workers fed meanwhile."""
        while True:
            self.feed(version)
            if self.poll(timeout=None, also=step):
                return self.cluster.step_result(step)

    def take_rollout_idle(self) -> float:
        """Mean idle seconds per rollout worker since the last call (workers idle now count
        up to now)."""
        now = time.perf_counter()
        idle = self.rollout_idle_s + sum(now - t for t in self.idle_since.values())
        self.idle_since = {w: now for w in self.idle_since}
        self.rollout_idle_s = 0.0
        return idle / self.workers

    def drain(self) -> None:
        """Wait for the chunks in flight (their results are discarded)."""
        while self.busy:
            self.poll(timeout=None)


def chunk_args(cfg: Config, c: int) -> tuple:
    """Chunk `c`'s collect arguments: exactly what sync mode gives worker `c % W` at step
    `c // W`."""
    workers = cfg.rollout.num_workers
    step, part = divmod(c, workers)
    states = start_states(cfg, step)
    return worker_shares(states.env_seeds, states.group_ids, cfg.seed + step, workers,
                         transcripts_wanted(cfg, step))[part]
