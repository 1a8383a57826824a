"""Reference players played through an env, scored as the model is scored: the baselines
every learning claim is read against (a uniformly random legal player, perfect play).

The env's spec names its reference players (`EnvSpec.reference`); an env that names only
its legal calls (`EnvSpec.legal_calls`) still has the random one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from arl.config import EnvConfig
from arl.env_spec import EnvContext, EnvSpec, resolve_env
from arl.protocols import Env
from arl.rollout.evaluation import Rate
from arl.types import Outcome, ToolCall


@dataclass(frozen=True)
class Played:
    """One reference episode: its reward (the sum of its turns'), how it ended and how many
    turns it took."""

    reward: float
    outcome: Outcome | None
    turns: int = 0


def has_player(spec: EnvSpec, player: str) -> bool:
    """Whether `spec`'s env can be played by reference player `player`."""
    return spec.reference is not None or (player == "random" and spec.legal_calls is not None)


def _call(spec: EnvSpec, env: Env, player: str, rng: random.Random) -> ToolCall:
    if spec.reference is not None:
        return spec.reference(env, player, rng)
    if player == "random" and spec.legal_calls is not None:
        return rng.choice(spec.legal_calls(env))
    raise ValueError(f"env {spec.name!r} has no {player!r} reference player")


def play_reference(env_cfg: EnvConfig, player: str, episodes: int, seed: int) -> list[Played]:
    """`episodes` episodes of `env_cfg`'s env (seeds seed, seed + 1, ...; each its own
    variant of the group of 8 that a seed would start) played by `player` to the end."""
    spec, rng, out = resolve_env(env_cfg.name), random.Random(seed), []
    for i in range(episodes):
        env = spec.make(env_cfg, EnvContext(variant=i % 8))
        out.append(_episode(spec, env, seed + i, player, rng))
    return out


def _episode(spec: EnvSpec, env: Env, seed: int, player: str, rng: random.Random) -> Played:
    env.reset(seed)
    reward = 0.0
    for turn in range(1, spec.max_turns + 1):
        step = env.step(_call(spec, env, player, rng))
        reward += step.reward
        if step.terminated or step.truncated:
            return Played(reward, step.outcome, turn)
    return Played(reward, None, spec.max_turns)


def reference_positions(env_cfg: EnvConfig, rows: list[dict], player: str,
                        seed: int) -> dict[str, Rate]:
    """`score_positions` for a reference player: the share of its moves among each row's
    good actions, and of illegal ones."""
    spec, rng = resolve_env(env_cfg.name), random.Random(seed)
    good = illegal = 0
    for i, row in enumerate(rows):
        env, answers = spec.position(env_cfg, row)
        played = _episode(spec, env, seed + i, player, rng)
        actions = played.outcome.actions if played.outcome is not None else ()
        good += bool(actions) and actions[0] in answers
        illegal += played.outcome is None or played.outcome.result == "invalid"
    return {"accuracy": Rate(good, len(rows)), "illegal": Rate(illegal, len(rows))}
