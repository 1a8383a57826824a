"""What `arl eval` reports: rates with 95 % confidence intervals, and the positions file.

Pure functions and records, no torch or Ray: the playing happens in `actors/evaluate.py`.

Positions file (JSON Lines), one position per line:
    {"board": "X.O......", "to_move": "X", "good_moves": [3, 5]}
`board` is 9 cells row by row (`X`, `O`, `.` for empty); squares are numbered 1-9 row by
row; every good move must be an empty square.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile
GAME_OUTCOMES = ("win", "draw", "loss", "illegal")


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


def game_outcome(outcome: str) -> str:
    """An env's final `outcome` as one of GAME_OUTCOMES (an invalid turn ends the game)."""
    return "illegal" if outcome in ("invalid", "invalid_call", "illegal_move") else outcome


@dataclass(frozen=True)
class Opponent:
    """An `--opponent` choice as env config values."""

    name: str  # random | minimax | eps_minimax
    epsilon: float = 0.0


def parse_opponent(spec: str) -> Opponent:
    """"minimax" | "random" | "eps:<p>" (minimax, but a random move with chance p)."""
    if spec in ("minimax", "random"):
        return Opponent(spec)
    if spec.startswith("eps:"):
        try:
            epsilon = float(spec[4:])
        except ValueError:
            epsilon = -1.0
        if 0.0 <= epsilon <= 1.0:
            return Opponent("eps_minimax", epsilon)
    raise ValueError(f"--opponent must be minimax, random or eps:<p> with 0 <= p <= 1; "
                     f"got {spec!r}")


@dataclass(frozen=True)
class Position:
    """One line of a positions file (see the module docstring)."""

    board: tuple[str, ...]
    to_move: str
    good_moves: tuple[int, ...]


def read_positions(path: str) -> list[Position]:
    """Every position of a JSONL file. Raises ValueError naming the line of the first bad
    one (not JSON, a missing or malformed field, a good move on an occupied square)."""
    positions = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                positions.append(_position(json.loads(line)))
            except (json.JSONDecodeError, ValueError, TypeError, KeyError) as err:
                raise ValueError(f"{path}:{number}: {err}") from err
    if not positions:
        raise ValueError(f"{path}: no positions")
    return positions


def _position(row: dict) -> Position:
    board, to_move, good = row["board"], row["to_move"], row["good_moves"]
    if not isinstance(board, str) or len(board) != 9 or set(board) - set("XO."):
        raise ValueError(f"board must be 9 of X, O, '.'; got {board!r}")
    if to_move not in ("X", "O"):
        raise ValueError(f"to_move must be X or O; got {to_move!r}")
    if (not isinstance(good, list) or not good
            or not all(type(m) is int and 1 <= m <= 9 for m in good)):
        raise ValueError(f"good_moves must be a non-empty list of squares 1-9; got {good!r}")
    taken = [m for m in good if board[m - 1] != "."]
    if taken:
        raise ValueError(f"good_moves {taken} are not empty squares of {board!r}")
    return Position(tuple(board), to_move, tuple(good))
