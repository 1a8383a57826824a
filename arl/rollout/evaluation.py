"""Evaluation as a library: a policy in-process with one engine plays episodes of an env,
full games against an env's bots, or given positions, and what it scores is reported as rates
with 95 % confidence intervals. `arl eval` (arl/app/eval_command.py) and evaluation during
training (each rollout worker's `evaluate`, fanned out by arl/actors/rollout_pool.py) call it.

A positions file holds one JSON object per line; its env reads them (`EnvSpec.position`).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from arl.config import EnvConfig
from arl.env_spec import resolve_env
from arl.envs.opponents import parse_opponent
from arl.envs.registry import make_env
from arl.episode import ChatRenderer, run_episodes
from arl.model.checkpoint.export import export_checkpoint
from arl.model.checkpoint.runs import is_checkpoint, saved_step
from arl.protocols import RolloutEngine
from arl.rollout.engines.hf import HFEngine
from arl.types import Outcome, SamplingParams, Trajectory

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile
GAME_OUTCOMES = ("win", "draw", "loss", "illegal")  # Outcome.result, invalid called illegal


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for a binomial rate (95 % by default). Unlike the normal
    approximation it stays inside [0, 1] and is not empty at 0 or `trials` successes."""
    if trials <= 0:
        raise ValueError("an interval needs at least one trial")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in 0..{trials}, got {successes}")
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Rate:
    """`count` of `total`, as a rate with its 95 % interval."""

    count: int
    total: int

    @property
    def rate(self) -> float:
        return self.count / self.total

    def as_dict(self) -> dict[str, object]:
        lo, hi = wilson_interval(self.count, self.total)
        return {"count": self.count, "rate": round(self.rate, 4),
                "ci95": [round(lo, 4), round(hi, 4)]}

    def __str__(self) -> str:
        lo, hi = wilson_interval(self.count, self.total)
        return f"{self.rate:6.1%}  [{lo:6.1%}, {hi:6.1%}]  ({self.count}/{self.total})"


def game_outcome(outcome: Outcome | None) -> str:
    """An episode's Outcome as one of GAME_OUTCOMES: an invalid turn ended it (or no outcome
    was reported, or none of win, draw, loss applies): illegal."""
    result = outcome.result if outcome is not None else None
    return result if result in ("win", "draw", "loss") else "illegal"


def read_positions(path: str, position: Callable[[dict], Any] | None = None) -> list[dict]:
    """Every row of a positions file (JSON Lines, one JSON object per line; what a row holds
    is the env's to say). With `position` (an env's `EnvSpec.position` bound to its config)
    every row is also built once. Raises ValueError naming the line of the first row that is
    not a JSON object or that `position` refuses, or the file if it has none."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError("a position must be a JSON object")
                if position is not None:
                    position(row)
            except (ValueError, TypeError, KeyError) as err:  # JSONDecodeError included
                raise ValueError(f"{path}:{number}: {err}") from None
            rows.append(row)
    if not rows:
        raise ValueError(f"{path}: no positions")
    return rows

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
    dtype: str = "auto",
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
        key = t.outcome.kind if t.outcome is not None else "unknown"
        outcomes[key] = outcomes.get(key, 0.0) + 1.0 / n
    return EvalReport(
        episodes=n,
        reward_mean=float(np.mean([t.reward for t in trajectories])),
        parse_rate=sum(t.num_tool_calls for t in trajectories) / max(turns, 1),
        outcomes=outcomes,
    )


def load_policy(path: str, dtype: str = "auto") -> HFEngine:
    """An engine holding the policy at `path`: a checkpoint directory (its hashes verified;
    exported to a temporary HF folder, LoRA merged: the same weights `arl export` writes)
    or a plain HF model directory."""
    if not is_checkpoint(path):
        return HFEngine(path, dtype=dtype)
    with tempfile.TemporaryDirectory(prefix="arl-policy-") as tmp:
        folder = export_checkpoint(path, os.path.join(tmp, "model"))
        engine = HFEngine(str(folder), dtype=dtype)
    engine.version = saved_step(path)
    return engine


def _renderer(engine: RolloutEngine) -> ChatRenderer:
    tokenizer = engine.get_tokenizer()
    return ChatRenderer(tokenizer, stop_token=tokenizer.eos_token)


def play_games(engine: RolloutEngine, env_cfg: EnvConfig, games: int, samples: int,
               params: SamplingParams) -> dict[str, Rate]:
    """Play `games` start states `samples` times each (env seeds params.seed + i) to the
    end; return the rate of each of GAME_OUTCOMES over all games played."""
    return game_rates(play(engine, env_cfg, games, samples, params))


def play(engine: RolloutEngine, env_cfg: EnvConfig, games: int, samples: int,
         params: SamplingParams) -> list[Trajectory]:
    """The episodes of `play_games`."""
    starts = [(make_env(env_cfg), params.seed + i, i) for i in range(games)
              for _ in range(samples)]
    return run_episodes(engine, _renderer(engine), starts, params,
                        max_turns=resolve_env(env_cfg.name).max_turns)


def game_rates(played: list[Trajectory]) -> dict[str, Rate]:
    """The rate of each of GAME_OUTCOMES over `played`."""
    counts = Counter(game_outcome(t.outcome) for t in played)
    return {o: Rate(counts[o], len(played)) for o in GAME_OUTCOMES}


def _metric_name(opponent: str) -> str:
    """An opponent's name in `eval/*` keys: arl's games' label (eps_minimax_0.3), else the
    env's spelling with ':' as '_'."""
    try:
        return parse_opponent(opponent).label
    except ValueError:
        return opponent.replace(":", "_")


def evaluation_metrics(engine: RolloutEngine, env_cfg: EnvConfig, opponents: list[str],
                       positions: dict[str, list[dict]], games: int, seed: int,
                       max_new_tokens: int) -> dict[str, float]:
    """Greedy play of the engine's current policy, as `eval/*` metrics: for each opponent
    (the env's spellings) `games` full games as X and as O, the games the env's spec names
    (`EnvSpec.eval_game`): their outcome rates and mean reward; and the accuracy on each
    positions file's rows."""
    greedy = SamplingParams(0.0, 1.0, max_new_tokens, seed)
    spec = resolve_env(env_cfg.name)
    metrics: dict[str, float] = {}
    for opponent in opponents if spec.eval_game is not None else ():
        name = _metric_name(opponent)
        for seat in ("X", "O"):
            _, cfg = spec.eval_game(env_cfg, opponent, seat)
            played = play(engine, cfg, games, 1, greedy)
            rates = game_rates(played)
            metrics[f"eval/{name}_as_{seat}_reward"] = float(np.mean([t.reward for t in played]))
            for outcome, rate in rates.items():
                metrics[f"eval/{name}_as_{seat}_{outcome}"] = rate.rate
            metrics[f"eval/{name}_as_{seat}_nonloss"] = rates["win"].rate + rates["draw"].rate
    for label, rows in positions.items():
        rates = score_positions(engine, env_cfg, rows, 1, greedy)
        metrics[f"eval/{label}_accuracy"] = rates["accuracy"].rate
        metrics[f"eval/{label}_illegal"] = rates["illegal"].rate
    return metrics


def score_positions(engine: RolloutEngine, env_cfg: EnvConfig, rows: list[dict], samples: int,
                    params: SamplingParams) -> dict[str, Rate]:
    """One move from each positions-file row (`EnvSpec.position` of `env_cfg`'s env),
    `samples` times: `accuracy` (one of the row's good actions) and `illegal` (an invalid
    call or an illegal move) over all moves made."""
    spec = resolve_env(env_cfg.name)
    if spec.position is None:
        raise ValueError(f"env {spec.name!r} reads no positions files")
    built = [(i, *spec.position(env_cfg, row))  # an env per episode
             for i, row in enumerate(rows) for _ in range(samples)]
    good_moves = {i: good for i, _, good in built}
    starts = [(env, params.seed + i, i) for i, env, _ in built]
    played = run_episodes(engine, _renderer(engine), starts, params, max_turns=1)
    good = sum(t.outcome is not None and bool(t.outcome.actions)
               and t.outcome.actions[0] in good_moves[t.group_id] for t in played)
    illegal = sum(t.outcome is None or t.outcome.result == "invalid" for t in played)
    total = len(played)
    return {"accuracy": Rate(good, total), "illegal": Rate(illegal, total)}
