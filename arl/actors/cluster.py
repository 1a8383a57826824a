"""The training loop's one handle on its workers: rollouts, learner steps, weights,
checkpoints and recovery, on one host (Ray's or this process's, arl/actors/hosts.py).

The interface is async first: `start_rollout` and `start_step` return handles at once,
`wait` says which are done, `rollout_result` and `step_result` take their results. The sync
loop uses the blocking forms built on them (`collect`, `learner_step`, `push_weights`); the
async pipeline (arl/app/pipeline.py) uses the handles. Nothing outside reaches past this
interface, and nothing is wired onto it after construction.
With `deterministic: true` in async mode, weights are pinned (arl/actors/pinned.py, `pinned`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from arl.actors.hosts import Host, Placement, RayHost
from arl.actors.learner_group import LearnerGroup
from arl.actors.pinned import PinnedWeights
from arl.actors.rollout_pool import RolloutBatch, RolloutCall, RolloutPool
from arl.actors.weight_sync import WeightSync, make_weight_sync
from arl.config import Config
from arl.model.checkpoint.store import load_policies
from arl.types import EpisodeSummary


class StepCall:
    """A learner step in flight: every rank's reference (rank 0's holds the metrics)."""

    def __init__(self, refs: list[Any]):
        self.refs = refs


class Cluster:
    """Rollout and learner workers for one run (a context manager that cleans up)."""

    def __init__(self, cfg: Config, host: Host | None = None):
        """host: where the workers live (None: Ray, `cfg.ray` says which cluster)."""
        self.cfg = cfg
        self.host = host if host is not None else RayHost()
        self._placement = Placement()
        self._learner: LearnerGroup | None = None
        self._rollout: RolloutPool | None = None
        self._sync: WeightSync | None = None
        self._loads: list[Any] = []  # the last publish's weight loads, one per worker
        self.pinned: PinnedWeights | None = None  # deterministic async (arl/actors/pinned.py)
        self._generation = 0  # learner groups built before the current one

    def __enter__(self) -> Cluster:
        """Open the host and start the workers; on failure close what the host opened."""
        try:
            self._placement = self.host.open(self.cfg)
            # Engines loaded before the learner starts: vLLM sizes its KV cache from free memory.
            self._rollout = RolloutPool(self.cfg, self.host, self._placement, source=self)
            self._rollout.wait_loaded()
            self._learner = self._new_learner()
            self._sync = make_weight_sync(self.cfg, self._learner, self._rollout.group)
            self.pinned = PinnedWeights.of(self.cfg, self._rollout.group, self.host.get)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _new_learner(self) -> LearnerGroup:
        return LearnerGroup(self.cfg, self.host, self._placement, self._generation)

    def __exit__(self, *exc: object) -> None:
        for part in filter(None, (self._rollout, self._learner)):
            part.close()
        self.host.close()

    # Rollouts.

    @property
    def rollout_workers(self) -> int:
        return len(self._rollout)

    @property
    def actor_restarts(self) -> int:
        """Rollout workers rebuilt (new processes) in this run."""
        return self._rollout.actor_restarts

    def start_rollout(self, worker: int, args: tuple) -> RolloutCall:
        """Start `worker` playing one share of a step (`worker_shares` gives the args)."""
        return self._rollout.start(worker, args)

    def rollout_result(self, call: RolloutCall) -> list[EpisodeSummary]:
        """The call's summaries (trajectories stay in the object store); `RolloutWorkerLost`
        if the worker died: it was rebuilt with the current weights; start the call again."""
        return self._rollout.result(call)

    def collect(self, env_seeds: list[int], group_ids: list[int], seed: int,
                transcripts: int = 0) -> RolloutBatch:
        """One step's groups, played by every rollout worker (RolloutPool.collect)."""
        return self._rollout.collect(env_seeds, group_ids, seed, transcripts)

    def wait(self, calls: Sequence[RolloutCall | StepCall], timeout: float | None) -> list[int]:
        """Indices of the done `calls`: wait up to `timeout` s (None: no limit) for one."""
        return self.host.ready([c.refs[0] for c in calls], timeout)

    def evaluate(self, positions: dict[str, list[dict]], seed: int) -> dict[str, float]:
        """`eval/*` metrics of the current weights, played by rollout worker 0."""
        if self.pinned:
            self.pinned.hold(0, self.weights_version)
        e = self.cfg.eval
        return self._rollout.evaluate(list(e.opponents), positions, e.games, seed)

    # The learner.

    def start_step(self, batch: RolloutBatch, advantages: np.ndarray,
                   keep: np.ndarray) -> StepCall:
        """Start one learner step on the batch's trajectories where `keep` is true."""
        return StepCall(self._learner.submit_step(advantages, keep, batch.trajectory_refs))

    def step_result(self, call: StepCall) -> dict[str, Any]:
        """The step's metrics. Raises `LearnerLost` if a rank died (`restart_learner`)."""
        return self._learner.get(call.refs)[0]

    def learner_step(self, batch: RolloutBatch, advantages: np.ndarray,
                     keep: np.ndarray) -> dict[str, Any]:
        """`start_step`, then its result."""
        return self.step_result(self.start_step(batch, advantages, keep))

    def restart_learner(self, checkpoint: str | None) -> None:
        """A new learner group and weight sync (a rank died), from `checkpoint`; then push."""
        self._learner.close()
        self._generation += 1
        self._learner = self._new_learner()
        self._sync = make_weight_sync(self.cfg, self._learner, self._rollout.group)
        if checkpoint is not None:
            self.load_checkpoint(checkpoint)  # pinned: with the versions the checkpoint kept
        elif self.pinned:
            self.pinned.restore({})

    # Weights.

    def publish_weights(self, version: int) -> None:
        """Send the learner's weights as `version` and queue a load on every rollout worker
        without waiting (each loads them after its current call); pinned, only keep them."""
        if self.pinned:
            self._sync.advance(version)
            self.pinned.keep(version, self._sync.exported())
        else:
            self._loads = self._sync.publish(version)

    def push_weights(self, version: int) -> None:
        """Send the learner's weights as `version`; wait until every rollout worker has them."""
        self._loads = self._sync.publish(version)
        self._rollout.wait_loads(self._loads)
        self._sync.finish()
        if self.pinned:
            self.pinned.pushed(version, self._sync.exported())

    @property
    def weights_version(self) -> int:
        """The version every rollout worker is meant to hold (the last one published)."""
        return self._sync.version if self._sync is not None else 0

    def restore_weights(self, worker: int) -> Any:
        """Queue the current weights on `worker` alone (a rebuilt one); the load's reference."""
        if self.pinned:
            self.pinned.loaded(worker, self.weights_version)
        return self._sync.restore(worker)

    def probe_learner(self) -> None:
        """Raise `LearnerLost` if a learner rank has died."""
        self._learner.probe()

    # Checkpoints.

    def load_checkpoint(self, directory: str) -> dict[str, Any]:
        """Restore the learner (and pinned, the older versions it kept) from `directory`;
        return the `extra` JSON `save_checkpoint` stored. Push weights afterwards."""
        extra = self._learner.load_checkpoint(directory)
        if self.pinned:
            self.pinned.restore(load_policies(directory))
        return extra

    def save_checkpoint(self, directory: str, step: int, extra: dict[str, Any]) -> None:
        """Checkpoint the learner after `step` steps, with the config, `extra` (JSON) and
        (pinned) the older versions the next steps play."""
        policies = self.pinned.policies(step, self.cfg.max_staleness) if self.pinned else None
        self._learner.save_checkpoint(directory, step, extra, policies)
