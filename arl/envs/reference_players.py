"""Reference players for arl's board games: what a trained policy is read against.

`random` plays a uniformly random legal move; `perfect` plays an immediate win where there
is one, else a minimax-best move (on the one-move task's reward table that scores the
most; in full games it never loses). Both answer with the env's own tool call, so the env
scores them exactly as it scores the model.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from arl.envs import tictactoe_rules as rules
from arl.envs.game_env import GameEnv
from arl.envs.tictactoe import CHOOSE_SQUARE
from arl.envs.tictactoe_move import TicTacToeMoveEnv
from arl.protocols import Env
from arl.types import ToolCall

PLAYERS = ("random", "perfect")


def _moves(env: Env) -> tuple[tuple[int, ...], Callable[[], tuple[int, ...]], str, str]:
    """(legal moves, a function giving the perfect player's moves, tool name, argument) of
    the position a live episode's env asks about."""
    if isinstance(env, TicTacToeMoveEnv):
        board, agent = env.board, env.agent
        return (rules.legal_moves(board),
                lambda: rules.winning_moves(board, agent) or rules.best_moves(board, agent),
                CHOOSE_SQUARE.name, "square")
    if isinstance(env, GameEnv):
        spec, board, agent = env.spec, env.board, env.agent
        legal = spec.legal_moves(board)

        def perfect() -> tuple[int, ...]:
            if spec.best_moves is None:
                raise ValueError(f"{spec.title} has no perfect player (no minimax here)")
            wins = tuple(m for m in legal if spec.winner(spec.play(board, m, agent)) == agent)
            return wins or spec.best_moves(board, agent)
        return legal, perfect, spec.tool.name, spec.arg
    raise ValueError(f"no reference players for {type(env).__name__}")


def reference_call(env: Env, player: str, rng: random.Random) -> ToolCall:
    """The call reference player `player` (PLAYERS) makes in `env`'s current position: a
    uniformly random choice among its moves. Raises ValueError for an unknown player, or
    where the env has none."""
    legal, perfect, tool, arg = _moves(env)
    if player == "random":
        moves = legal
    elif player == "perfect":
        moves = perfect()
    else:
        raise ValueError(f"reference player must be one of {PLAYERS}, got {player!r}")
    return ToolCall(tool, {arg: rng.choice(moves)})
