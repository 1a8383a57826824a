"""Evaluate a policy in-process: play N episodes of an env with one engine, report rates."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from actors.engines.hf import HFEngine
from arl.config import EnvConfig
from arl.episode import ChatRenderer, run_episodes
from arl.types import SamplingParams, Trajectory
from envs import make_env


@dataclass(frozen=True)
class EvalReport:
    episodes: int
    reward_mean: float
    parse_rate: float  # turns whose tool call parsed and validated
    outcomes: dict[str, float]  # outcome -> fraction of episodes

    def as_dict(self) -> dict[str, object]:
        return {
            "episodes": self.episodes,
            "reward_mean": round(self.reward_mean, 4),
            "parse_rate": round(self.parse_rate, 4),
            "outcomes": {k: round(v, 4) for k, v in sorted(self.outcomes.items())},
        }


def evaluate(
    model_path: str,
    env_cfg: EnvConfig,
    episodes: int,
    seed: int,
    dtype: str = "bfloat16",
    temperature: float = 1.0,
    max_new_tokens: int = 48,
    max_turns: int = 9,
) -> EvalReport:
    """Play `episodes` episodes from distinct start states (env seeds seed, seed+1, ...)."""
    engine = HFEngine(model_path, dtype=dtype)
    tokenizer = engine.get_tokenizer()
    renderer = ChatRenderer(tokenizer, stop_token=tokenizer.eos_token)
    starts = [(make_env(env_cfg), seed + i, i) for i in range(episodes)]
    params = SamplingParams(temperature, 1.0, max_new_tokens, seed)
    return summarize(run_episodes(engine, renderer, starts, params, max_turns=max_turns))


def summarize(trajectories: list[Trajectory]) -> EvalReport:
    n = len(trajectories)
    turns = sum(t.num_turns for t in trajectories)
    outcomes: dict[str, float] = {}
    for t in trajectories:
        key = str(t.info["outcome"]) if "outcome" in t.info else "unknown"
        outcomes[key] = outcomes.get(key, 0.0) + 1.0 / n
    return EvalReport(
        episodes=n,
        reward_mean=float(np.mean([t.reward for t in trajectories])),
        parse_rate=sum(t.num_tool_calls for t in trajectories) / max(turns, 1),
        outcomes=outcomes,
    )
