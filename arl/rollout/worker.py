"""The rollout worker: an inference engine plus environments, playing groups of episodes.

A plain class, free of Ray: arl/actors/rollout.py hosts it as a Ray actor (with the model
folder shipped to its node and env runners, where there are), ActorGroup in-process for
tests and the in-process backend.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

from arl.agent import resolve_agent
from arl.config import EnvConfig, ModelConfig, RolloutConfig
from arl.env_spec import resolve_env
from arl.episode import ChatRenderer
from arl.model.causal_lm import set_torch_threads
from arl.model.transport import Layout, SyncGroup
from arl.rollout.engines.registry import make_engine
from arl.rollout.evaluation import evaluation_metrics
from arl.rollout.play import play_starts
from arl.rollout.round_barrier import RoundBarrier
from arl.rollout.snapshot_policy import SnapshotPolicy
from arl.types import EpisodeSummary, Generation, SamplingParams, Trajectory


class RolloutWorker:
    """Collects trajectory groups for given start states with the weights it holds.

    Contract: `collect(env_seeds, group_ids, seed)` plays `group_size` episodes from each
    start state (all G episodes of a group share the env seed, so they start identically),
    batched through one engine, and returns (summaries, trajectories) in the same order:
    group by group, G consecutive episodes each. The same weights, start states and `seed`
    give the same trajectories.
    """

    def __init__(
        self,
        model: ModelConfig,
        rollout: RolloutConfig,
        env: EnvConfig,
        threads: int,
    ):
        """`model.path` is a model folder on this machine."""
        set_torch_threads(threads)
        self.cfg = rollout
        self.env_cfg = env
        self.engine = make_engine(model, rollout)
        tokenizer = self.engine.get_tokenizer()
        self.renderer = ChatRenderer(tokenizer, stop_token=tokenizer.eos_token)
        # Self-play: a frozen snapshot of the policy plays the opponent (snapshot_policy.py).
        self.spec = resolve_env(env.name)
        self.snapshot: SnapshotPolicy | None = None
        self.self_play = self.spec.self_play(env) if self.spec.self_play is not None else None
        if self.self_play is not None:
            self.snapshot = SnapshotPolicy(model.path, rollout.temperature)
        self.sync: SyncGroup | None = None  # this worker's end of a collective weight sync
        # An agent function plays the episodes, where env.agent names one (arl/agent.py).
        self.agent = resolve_agent(env.agent) if env.agent else None
        # Env runners play the episodes, where there are (rollout.env_actors): an object
        # with `play(starts, group_size, env_cfg, params, version, max_model_len)` that the
        # Ray layer sets (arl/actors/env_runner.py); they sample through the barrier.
        self.barrier = RoundBarrier(self.engine.generate)
        self.runners: Any = None

    def collect(
        self, env_seeds: Sequence[int], group_ids: Sequence[int], seed: int,
        transcripts: int = 0,
    ) -> tuple[list[EpisodeSummary], list[Trajectory]]:
        """Play the groups (see the class docstring). The first episode of each of the first
        `transcripts` groups carries its decoded conversation in `summary.transcript`."""
        if self.cfg.fault_delay_s > 0:  # a slow worker, on purpose (seeded: reproducible)
            time.sleep(random.Random(seed).uniform(0.0, self.cfg.fault_delay_s))
        env_cfg = self.env_cfg
        if self.spec.schedule is not None:  # a curriculum: the config at this version
            env_cfg = self.spec.schedule(env_cfg, self.engine.version)
        params = SamplingParams(
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            max_new_tokens=self.cfg.max_new_tokens,
            seed=seed,
        )
        starts = [(int(env_seed), int(group_id), i)
                  for env_seed, group_id in zip(env_seeds, group_ids, strict=True)
                  for i in range(self.cfg.group_size)]
        if self.runners is not None:
            played = self.runners.play(starts, self.cfg.group_size, env_cfg, params,
                                       self.engine.version,
                                       int(getattr(self.engine, "max_model_len", 0) or 0))
        else:
            played = play_starts(self.engine, self.renderer, self.spec, self.agent, env_cfg,
                                 starts, params, self.cfg, self._opponent)
        size = self.cfg.group_size  # episodes come group by group, in order
        trajectories = [
            dataclasses.replace(t, episode_id=t.group_id * size + i % size)
            for i, t in enumerate(played)
        ]
        tokenizer = self.engine.get_tokenizer()
        summaries = [
            t.summary(tokenizer.decode(t.token_ids.tolist())
                      if i % size == 0 and i // size < transcripts else None)
            for i, t in enumerate(trajectories)
        ]
        # The learner trains on token ids; the messages travel only in transcripts.
        return summaries, [dataclasses.replace(t, messages=()) for t in trajectories]

    def generate_part(self, call_id: int, part: int, prompts: list[list[int]],
                      params: SamplingParams) -> list[Generation]:
        """One env runner's request of a sampling round (arl/rollout/round_barrier.py)."""
        return self.barrier.request(call_id, part, prompts, params)

    def leave_part(self, call_id: int, part: int) -> None:
        """An env runner's part of a collect has no more requests."""
        self.barrier.leave(call_id, part)

    def _opponent(self) -> Any:
        """The env's opponent backed by the snapshot (self-play), else None."""
        if self.snapshot is None:
            return None
        return self.self_play.opponent(self.snapshot.choose)

    def update_weights(self, weights: Mapping[str, Any], version: int) -> int:
        """Load `weights` as `version` (and into the self-play snapshot every
        `env.opponent_refresh_every` versions); return this process's pid, which tells the
        driver whether the worker it talks to is a rebuilt one."""
        with self.barrier.engine_lock:  # never under a round of an abandoned collect
            self.engine.update_weights(weights, version)
        if self.snapshot is not None and version % self.self_play.refresh_every == 0:
            self.snapshot.load(weights, version)
        return os.getpid()

    def join_sync(self, address: str, port: int, rank: int, world: int, backend: str,
                  layout: Layout, bucket_bytes: int, timeout_s: float) -> None:
        """Become rank `rank` of a (new) weight-sync group (arl/model/transport.py)."""
        if self.sync is not None:
            self.sync.close()
        self.sync = SyncGroup(address, port, rank, world, backend, timeout_s)
        self.layout, self.bucket_bytes = layout, bucket_bytes

    def receive_weights(self, version: int) -> int:
        """Receive one broadcast from learner rank 0 and load it as `version`; return the
        pid like `update_weights`."""
        stream = self.sync.receive_stream(self.layout, self.bucket_bytes)
        streamed = getattr(self.engine, "update_weights_streamed", None)
        if streamed is None or self.snapshot is not None:  # they need every tensor at once
            return self.update_weights(dict(stream), version)
        with self.barrier.engine_lock:  # bucket by bucket into the engine's own weights
            streamed(stream, self.layout.shapes_by_name(), version)
        return os.getpid()

    def evaluate(self, opponents: list[str], positions: dict[str, list[dict]], games: int,
                 seed: int) -> dict[str, float]:
        """`eval/*` metrics of the weights this worker holds (arl/rollout/evaluation.py), and
        `eval/policy_version`: which weights those are."""
        with self.barrier.engine_lock:
            metrics = evaluation_metrics(self.engine, self.env_cfg, opponents, positions,
                                         games, seed, self.cfg.max_new_tokens)
        return {**metrics, "eval/policy_version": float(self.engine.version)}

    def loaded(self) -> int:
        """This process's pid, once the engine is loaded (a call waits for construction)."""
        return os.getpid()

    @property
    def version(self) -> int:
        return self.engine.version

    def close(self) -> None:
        if self.sync is not None:
            self.sync.close()
        locked = self.barrier.engine_lock.acquire(timeout=10)  # a round may still finish
        try:
            self.engine.close()
        finally:
            if locked:
                self.barrier.engine_lock.release()
