"""The env registry: the env `env.name` names, built from its config."""

from __future__ import annotations

from arl.config import EnvConfig
from arl.protocols import Env
from arl.schema import ENV_NAMES
from envs.connect_four import SPEC as CONNECT_FOUR
from envs.connect_four import make_connect_four
from envs.game_env import GameSpec
from envs.opponents import Opponent
from envs.tictactoe import SPEC as TICTACTOE
from envs.tictactoe import make_tictactoe
from envs.tictactoe_move import TicTacToeMoveEnv

# The `outcome` values each env reports on an episode's last step.
OUTCOME_KINDS = {
    "tictactoe_move": ("invalid_call", "illegal_move", "legal", "best", "win"),
    "tictactoe": ("win", "draw", "loss", "invalid"),
    "connect_four": ("win", "draw", "loss", "invalid"),
}


def game_spec(name: str) -> GameSpec:
    """The rules of the full-game env `name` (tictactoe | connect_four)."""
    specs = {"tictactoe": TICTACTOE, "connect_four": CONNECT_FOUR}
    if name not in specs:
        raise ValueError(f"{name!r} is not a full-game env; choose from {sorted(specs)}")
    return specs[name]


def make_env(cfg: EnvConfig, opponent: Opponent | None = None, variant: int = 0) -> Env:
    """The env `cfg.name` names, built from its config.

    `opponent` replaces the configured opponent of the full games (it is required when
    cfg.opponent == "policy", e.g. an `envs.opponents.PolicyOpponent` for self-play) and is
    ignored by tictactoe_move, which has no opponent. `variant` is the episode's index in
    its group, for envs whose groups play equivalent variants of one start state
    (tictactoe_move with `group_symmetries`); others ignore it.
    """
    if cfg.name == "tictactoe_move":
        return TicTacToeMoveEnv(cfg, variant)
    if cfg.name == "tictactoe":
        return make_tictactoe(cfg, opponent)
    if cfg.name == "connect_four":
        return make_connect_four(cfg, opponent)
    raise ValueError(f"unknown env {cfg.name!r}; choose from {list(ENV_NAMES)}")
