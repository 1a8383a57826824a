"""Env-runner actors: episodes played in processes of their own, sampled by a rollout worker.

With `rollout.env_actors: N`, each rollout worker has N `EnvRunner`s, each with its own CPUs
(`rollout.cpus_per_env_actor`): a slow or CPU-heavy env (a sandbox, a simulator, an agent
function) then scales apart from the inference engine. A runner plays a contiguous part of
the worker's share of a step, built-in envs and agent functions alike (`play_starts`, the same
code the worker runs itself with 0 runners), through `WorkerEngine`: a RolloutEngine whose
`generate` asks the worker, which batches the requests of all its runners round by round
(arl/rollout/round_barrier.py). The same seeds give the same trajectories with or without runners.

A plain class, like the workers: the rollout pool hosts runners as Ray actors.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from arl.actors.group import until_rebuilt
from arl.actors.model_files import ShippedModel, local_model
from arl.agent import resolve_agent
from arl.config import EnvConfig, ModelConfig, RolloutConfig
from arl.env_spec import resolve_env
from arl.episode import ChatRenderer
from arl.model.causal_lm import set_torch_threads
from arl.rollout.play import play_starts
from arl.types import Generation, SamplingParams, Trajectory

ENV_GROUP = "env"  # the rollout worker's concurrency group for its runners' requests


class WorkerEngine:
    """The rollout worker's engine as a runner sees it: `generate` is one request of a
    round (RolloutWorker.generate_part), answered once every runner of the collect asked."""

    def __init__(self, worker: Any, call_id: int, part: int, version: int, tokenizer: Any,
                 max_model_len: int):
        self.worker, self.call_id, self.part = worker, call_id, part
        self.version, self.tokenizer, self.max_model_len = version, tokenizer, max_model_len

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        import ray

        return ray.get(self.worker.generate_part.options(concurrency_group=ENV_GROUP).remote(
            self.call_id, self.part, prompts, params))

    def update_weights(self, weights: Any, version: int) -> None:
        raise RuntimeError("a runner holds no weights: the rollout worker samples")

    def get_tokenizer(self) -> Any:
        return self.tokenizer


class EnvRunner:
    """Plays parts of a rollout worker's collects (see the module docstring)."""

    def __init__(self, model: ModelConfig, rollout: RolloutConfig, env: EnvConfig,
                 threads: int, shipped: ShippedModel | None = None):
        from transformers import AutoTokenizer

        set_torch_threads(threads)
        model = local_model(model, shipped)
        self.tokenizer = AutoTokenizer.from_pretrained(model.path)  # what the engine uses
        self.renderer = ChatRenderer(self.tokenizer, stop_token=self.tokenizer.eos_token)
        self.cfg = rollout
        self.spec = resolve_env(env.name)
        self.agent = resolve_agent(env.agent) if env.agent else None

    def play(self, worker: Any, call_id: int, part: int, starts: list[tuple[int, int, int]],
             env_cfg: EnvConfig, params: SamplingParams, version: int,
             max_model_len: int) -> list[Trajectory]:
        """Play `starts` (part `part` of collect `call_id` of `worker`, whose weights are
        `version`); tell the worker when this part has no more requests."""
        import ray

        engine = WorkerEngine(worker, call_id, part, version, self.tokenizer, max_model_len)
        try:
            return play_starts(engine, self.renderer, self.spec, self.agent, env_cfg, starts,
                               params, self.cfg, lambda: None)
        finally:
            ray.get(worker.leave_part.options(concurrency_group=ENV_GROUP).remote(call_id,
                                                                                 part))

    def pid(self) -> int:
        """This process's id (a probe of liveness)."""
        return os.getpid()


class Runners:
    """A rollout worker's env runners: a collect fanned out over them, and replayed whole
    (same seeds, so the same episodes) when a runner dies, once Ray has rebuilt it. A runner
    that every other part waits for longer than `timeout_s` (0: never) is killed and rebuilt
    the same way."""

    def __init__(self, handles: Sequence[Any], barrier: Any, max_restarts: int,
                 timeout_s: float = 0.0):
        self.handles, self.barrier, self.max_restarts = list(handles), barrier, max_restarts
        self.timeout = timeout_s or None
        # Collect ids unique across this worker's rebuilds: a runner still playing for a
        # worker that died must never pass for a part of a new collect.
        self.calls = int.from_bytes(os.urandom(6), "big")
        self.restarts = 0  # collects replayed because a runner died or hung, whole run

    def play(self, starts: list[tuple[int, int, int]], group_size: int, env_cfg: EnvConfig,
             params: SamplingParams, version: int, max_model_len: int) -> list[Trajectory]:
        """The trajectories of `starts`, played by the runners in contiguous parts of whole
        groups, in order; the first counts the replays this took in
        `rollout/env_actor_restarts`."""
        import numpy as np
        import ray

        me = ray.get_runtime_context().current_actor
        groups = np.array_split(np.arange(len(starts) // group_size), len(self.handles))
        parts = [starts[g[0] * group_size:(g[-1] + 1) * group_size] if len(g) else []
                 for g in groups]
        limit = self.max_restarts if self.max_restarts >= 0 else 10**9
        before = self.restarts
        for _ in range(limit + 1):
            self.calls += 1
            self.barrier.open(self.calls, len(parts))
            refs = [h.play.remote(me, self.calls, k, part, env_cfg, params, version,
                                  max_model_len)
                    for k, (h, part) in enumerate(zip(self.handles, parts, strict=True))]
            try:
                lost = self._wait(refs)
                if not lost:
                    return _counted([t for part in ray.get(refs) for t in part],
                                    self.restarts - before)
            finally:  # whatever happened, no part of this collect samples on
                self.barrier.abort(self.calls)
                ray.wait(refs, num_returns=len(refs), timeout=60)
            self.restarts += 1
            for k in lost:
                self._await_rebuilt(k)
        raise RuntimeError("an env runner kept failing; rollout.max_restarts exceeded")

    def _wait(self, refs: list[Any]) -> list[int]:
        """Wait for every part; the runners lost (dead, or hung and killed here), or []. A
        part that fails otherwise (an engine error) raises."""
        import ray

        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1, timeout=self.timeout)
            if not done:  # nothing for timeout_s: kill the parts everyone waits for
                hung = self.barrier.stragglers(self.calls)
                for k in hung:
                    ray.kill(self.handles[k], no_restart=False)
                return hung
            try:
                ray.get(done[0])
            except ray.exceptions.RayActorError:  # the others now give up, and more may
                self.barrier.abort(self.calls)    # have died with it (a lost node)
                ray.wait(refs, num_returns=len(refs), timeout=60)
                return [k for k, ref in enumerate(refs) if _died(ref)]
        return []

    def _await_rebuilt(self, k: int, wait_s: float = 300.0) -> None:
        import ray

        until_rebuilt(lambda: ray.get(self.handles[k].pid.remote(), timeout=wait_s),
                      f"env runner {k}", wait_s)


def _died(ref: Any) -> bool:
    """Whether the call behind a finished `ref` failed because its actor died."""
    import ray

    ready, _ = ray.wait([ref], timeout=0)
    if not ready:
        return False
    try:
        ray.get(ref)
    except ray.exceptions.RayActorError:
        return True
    except Exception:  # any other failure is not a death
        return False
    return False


def _counted(played: list[Trajectory], restarts: int) -> list[Trajectory]:
    """`played` with `rollout/env_actor_restarts` on its first trajectory."""
    import dataclasses

    if played:
        first = played[0]
        played[0] = dataclasses.replace(first, metrics={
            **first.metrics, "rollout/env_actor_restarts": float(restarts)})
    return played
