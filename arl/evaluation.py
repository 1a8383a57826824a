"""What `arl eval` reports: rates with 95 % confidence intervals, and positions files.

Pure functions and records, no torch or Ray: the playing happens in `actors/evaluate.py`.
A positions file holds one JSON object per line; its env reads them (`EnvSpec.position`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from arl.types import Outcome

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
