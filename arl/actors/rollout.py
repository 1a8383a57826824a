"""The rollout worker as a Ray actor: arl/rollout/worker.py's plain class, with the model
folder shipped to its node (arl/actors/model_files.py) and its env runners, where there are
(rollout.env_actors, arl/actors/env_runner.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from arl.actors.env_runner import Runners
from arl.actors.model_files import ShippedModel, local_model
from arl.config import EnvConfig, ModelConfig, RolloutConfig
from arl.rollout.worker import RolloutWorker


class RolloutActor(RolloutWorker):
    """A RolloutWorker on a node of the cluster (ActorGroup spawns it)."""

    def __init__(self, model: ModelConfig, rollout: RolloutConfig, env: EnvConfig,
                 threads: int, shipped: ShippedModel | None = None,
                 runners: Sequence[Any] = ()):
        super().__init__(local_model(model, shipped), rollout, env, threads)
        if runners:
            self.runners = Runners(runners, self.barrier, rollout.max_restarts,
                                   rollout.timeout_s)
