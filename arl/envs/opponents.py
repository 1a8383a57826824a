"""Opponents for the full-game envs, one protocol for both games.

An opponent only chooses moves; the env owns the board and the rules. Opponents are built
from plain functions of the game (`legal_moves`, `best_moves`), so the same classes play
tic-tac-toe and connect four. All randomness comes from the `rng` the env passes in, which the
env seeds from the episode seed: same seed and same agent moves give the same game.
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from arl.envs import connect_four_rules, tictactoe_rules
from arl.envs.config import FullGameConfig

Board = tuple[str, ...]
MovesFn = Callable[[Board], tuple[int, ...]]
BestFn = Callable[[Board, str], tuple[int, ...]]


@runtime_checkable
class Opponent(Protocol):
    """Chooses a legal move (square 1-9 or column 1-7) for `player` on a non-terminal board."""

    def choose(self, board: Board, player: str, rng: random.Random) -> int: ...


class RandomOpponent:
    """A uniformly random legal move."""

    def __init__(self, legal_moves: MovesFn):
        self._legal_moves = legal_moves

    def choose(self, board: Board, player: str, rng: random.Random) -> int:
        return rng.choice(self._legal_moves(board))


class MinimaxOpponent:
    """A uniformly random move among the search's best moves; an immediate win is always taken
    first (value-best moves may also be slower wins, and a short game saves tokens)."""

    def __init__(self, best_moves: BestFn, winning_moves: BestFn):
        self._best_moves = best_moves
        self._winning_moves = winning_moves

    def choose(self, board: Board, player: str, rng: random.Random) -> int:
        wins = self._winning_moves(board, player)
        return rng.choice(wins or self._best_moves(board, player))


class EpsMinimaxOpponent:
    """With probability `epsilon` a random legal move, otherwise the minimax move."""

    def __init__(self, epsilon: float, legal_moves: MovesFn, best_moves: BestFn,
                 winning_moves: BestFn):
        if not 0.0 <= epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
        self._epsilon = epsilon
        self._random = RandomOpponent(legal_moves)
        self._minimax = MinimaxOpponent(best_moves, winning_moves)

    def choose(self, board: Board, player: str, rng: random.Random) -> int:
        # Draw the coin every move, even at epsilon 0 or 1, so the rng stream does not depend
        # on epsilon's value (it keeps games comparable across configs).
        explore = rng.random() < self._epsilon
        return (self._random if explore else self._minimax).choose(board, player, rng)


class PolicyOpponent:
    """An opponent backed by any callable `policy(board, player, rng) -> move`: the hook for
    self-play, where the callable renders the board, asks a model, and parses its answer.

    A model may answer with an illegal move (or None when it produced no usable call); then
    `fallback` moves instead and `fallback_count` goes up, so the game always goes on.
    """

    def __init__(self, policy: Callable[[Board, str, random.Random], int | None],
                 legal_moves: MovesFn, fallback: Opponent | None = None):
        self._policy = policy
        self._legal_moves = legal_moves
        self._fallback = fallback or RandomOpponent(legal_moves)
        self.fallback_count = 0

    def choose(self, board: Board, player: str, rng: random.Random) -> int:
        move = self._policy(board, player, rng)
        legal = isinstance(move, int) and not isinstance(move, bool)
        if legal and move in self._legal_moves(board):
            return int(move)  # type: ignore[arg-type]
        self.fallback_count += 1
        return self._fallback.choose(board, player, rng)


def _c4_wins(board: Board, player: str) -> tuple[int, ...]:
    rules = connect_four_rules
    return tuple(c for c in rules.legal_moves(board)
                 if rules.winner(rules.play(board, c, player)) == player)


class PoolOpponent:
    """One opponent of a pool per game: drawn when the game starts (`reset`, from the env's
    episode-seeded generator), so the G games of a group meet the same one."""

    def __init__(self, members: list[Opponent]):
        if not members:
            raise ValueError("an opponent pool needs at least one member")
        self.members = members
        self.current = members[0]

    def reset(self, rng: random.Random) -> None:
        self.current = rng.choice(self.members)

    def choose(self, board: Board, player: str, rng: random.Random) -> int:
        return self.current.choose(board, player, rng)


def make_opponent(cfg: FullGameConfig, game: str, policy: Opponent | None = None) -> Opponent:
    """The opponent `cfg.opponent` names for `game` ("tictactoe" or "connect_four").

    "policy" (self-play) is the `policy` opponent the caller passes (a PolicyOpponent over a
    snapshot of the model); "pool" draws one of `cfg.opponent_pool` per game (its "policy"
    member is `policy` too).
    """
    if cfg.opponent == "pool":
        return PoolOpponent([_pool_member(cfg, game, spec, policy)
                             for spec in cfg.opponent_pool])
    if cfg.opponent == "policy":
        if policy is None:
            raise ValueError("opponent 'policy' needs an Opponent passed to make_env(cfg, "
                             "opponent=)")
        return policy
    return _rule_opponent(cfg, game)


def opponent_for(cfg: FullGameConfig, game: str, given: Opponent | None) -> Opponent:
    """The opponent a full-game env plays: `given` (a person, a policy snapshot) replaces
    the configured one, except in a pool, where it is the pool's "policy" member."""
    if given is not None and cfg.opponent != "pool":
        return given
    return make_opponent(cfg, game, given)


def _pool_member(cfg: FullGameConfig, game: str, spec: str, policy: Opponent | None) -> Opponent:
    """A pool entry: random | minimax | policy | eps_minimax:<p>."""
    if spec == "policy":
        return make_opponent(dataclasses.replace(cfg, opponent="policy"), game, policy)
    choice = parse_opponent(spec)
    return _rule_opponent(dataclasses.replace(cfg, opponent=choice.name,
                                              opponent_epsilon=choice.epsilon), game)


def _rule_opponent(cfg: FullGameConfig, game: str) -> Opponent:
    """random, minimax or eps_minimax for `game`."""
    if game == "tictactoe":
        rules = tictactoe_rules
        legal: MovesFn = rules.legal_moves
        best: BestFn = rules.best_moves
        wins: BestFn = rules.winning_moves
    elif game == "connect_four":
        legal = connect_four_rules.legal_moves
        best = functools.partial(connect_four_rules.best_moves, depth=cfg.search_depth)
        wins = _c4_wins
    else:
        raise ValueError(f"no opponents for game {game!r}")
    if cfg.opponent == "random":
        return RandomOpponent(legal)
    if cfg.opponent == "minimax":
        return MinimaxOpponent(best, wins)
    if cfg.opponent == "eps_minimax":
        return EpsMinimaxOpponent(cfg.opponent_epsilon, legal, best, wins)
    raise ValueError(f"unknown opponent {cfg.opponent!r}")


@dataclasses.dataclass(frozen=True)
class OpponentChoice:
    """An opponent named in a list (`eval.opponents`, `env.opponent_pool`, `arl eval
    --opponent`) as env config values."""

    name: str  # random | minimax | eps_minimax
    epsilon: float = 0.0

    @property
    def label(self) -> str:
        """The name in metric keys: random, minimax or eps_minimax_<p>."""
        return f"eps_minimax_{self.epsilon:g}" if self.name == "eps_minimax" else self.name


def parse_opponent(spec: str) -> OpponentChoice:
    """"minimax" | "random" | "eps_minimax:<p>" (minimax, but a random move with chance p;
    the older spelling "eps:<p>" is read too)."""
    if spec in ("minimax", "random"):
        return OpponentChoice(spec)
    kind, _, value = spec.partition(":")
    if kind in ("eps_minimax", "eps") and value:
        try:
            epsilon = float(value)
        except ValueError:
            epsilon = -1.0
        if 0.0 <= epsilon <= 1.0:
            return OpponentChoice("eps_minimax", epsilon)
    raise ValueError(f"opponent must be minimax, random or eps_minimax:<p> with 0 <= p <= 1; "
                     f"got {spec!r}")


def opponent_schedule(env: FullGameConfig, step: int) -> FullGameConfig:
    """`env` with the eps_minimax curriculum applied at `step` (the version being played):
    epsilon falls linearly from `epsilon_start` to `opponent_epsilon` over
    `epsilon_decay_steps`, then stays."""
    if env.epsilon_start < 0:
        return env
    done = min(1.0, step / env.epsilon_decay_steps) if env.epsilon_decay_steps else 1.0
    eps = env.epsilon_start + (env.opponent_epsilon - env.epsilon_start) * done
    return dataclasses.replace(env, opponent_epsilon=eps)
