"""A rollout worker's share of a step, played: its start states as episodes of the env, or of
the agent function the config names. The same code runs in the worker and in each env runner
(rollout.env_actors), so the same seeds give the same trajectories either way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from arl.agent import AgentTask
from arl.config import EnvConfig, RolloutConfig
from arl.env_spec import EnvContext, EnvSpec
from arl.episode import ChatRenderer, run_episodes
from arl.protocols import RolloutEngine
from arl.rollout.agent_endpoint import play_agent_episodes
from arl.types import SamplingParams, Trajectory


def play_starts(engine: RolloutEngine, renderer: ChatRenderer, spec: EnvSpec,
                agent: Callable | None, env_cfg: EnvConfig, starts: Sequence[tuple[int, int, int]],
                params: SamplingParams, rollout: RolloutConfig,
                opponent: Callable[[], Any]) -> list[Trajectory]:
    """Play every (env seed, group id, index in group) of `starts` with the env `spec`, or
    with the agent function `agent` where there is one; trajectories in order. `opponent()`
    gives the self-play opponent of one episode (or None)."""
    if agent is not None:
        tasks = [AgentTask(s, g, i, env_cfg, max_turns=rollout.max_turns, opponent=opponent())
                 for s, g, i in starts]
        return play_agent_episodes(engine, renderer, agent, tasks, params, rollout.max_turns,
                                   rollout.endpoint_host, rollout.episode_timeout_s)
    envs = [(spec.make(env_cfg, EnvContext(i, opponent())), s, g) for s, g, i in starts]
    return run_episodes(engine, renderer, envs, params, max_turns=rollout.max_turns,
                        timeout_s=rollout.episode_timeout_s)
