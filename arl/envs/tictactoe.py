"""Tic-tac-toe, a full game against an opponent (see `envs.game_env.GameEnv` for the contract).

The tool is `choose_square(square: 1-9)`; squares are numbered row by row, and the rendered
board shows each empty square's number.
"""

from __future__ import annotations

from arl.envs import tictactoe_rules as rules
from arl.envs.config import TicTacToeConfig
from arl.envs.game_env import GameEnv, GameSpec, move_tool
from arl.envs.opponents import Opponent, opponent_for

CHOOSE_SQUARE = move_tool(
    name="choose_square",
    arg="square",
    maximum=9,
    description="Put your mark on an empty square of the tic-tac-toe board.",
    arg_help="Square number 1-9, row by row from the top left.",
)

SPEC = GameSpec(
    title="tic-tac-toe",
    tool=CHOOSE_SQUARE,
    arg="square",
    num_moves=9,
    taken="is taken",
    initial=rules.EMPTY_BOARD,
    legal_moves=rules.legal_moves,
    play=rules.play,
    winner=rules.winner,
    render=rules.render,
    best_moves=rules.best_moves,
)


def make_tictactoe(cfg: TicTacToeConfig, opponent: Opponent | None = None,
                  variant: int = 0) -> GameEnv:
    """A tic-tac-toe env; `opponent` overrides the one `cfg.opponent` names; `variant` is the
    episode's index in its group (see GameEnv)."""
    return GameEnv(SPEC, opponent_for(cfg, "tictactoe", opponent), cfg, variant)
