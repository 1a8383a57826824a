"""Guess the number: a multi-turn env written outside arl, as a user would write one.

The agent has `max_guesses` turns to find a hidden integer in [low, high] with the tool
`guess(number)`; after each wrong guess the env says "higher" or "lower". Finding it earns
`reward_found` minus `turn_cost` per earlier guess, so halving the interval (binary search) is
the best policy; running out of guesses earns `reward_missed`, and a malformed call or a
number outside [low, high] ends the episode with `reward_invalid`.

Two choices make the task learnable by a small model in minutes, and each can be turned off:
- `show_interval`: each hint restates what all hints so far leave ("7: higher, so 8 to 20"),
  as a game shows its board, so a turn's reply depends on the last message alone rather
  than on arithmetic over the whole history. It tells what is known, not what to guess.
- `reward_per_bit`: a per-turn reward for what a guess teaches, in bits (log2 of the
  interval's size before over after; the number found leaves one). It is potential-based
  shaping (Ng, Harada and Russell 1999: F = Phi(s') - Phi(s), Phi = -bits still unknown), so
  the best policy is unchanged, and every turn gets a signal of its own instead of only the
  last one. `shaping: expected` pays its mean over the numbers the interval still holds
  (each equally likely) instead of what this number's answer happened to narrow: the same
  expected return for every policy, without the luck of the hidden number.

Train it from the repository root (any folder on PYTHONPATH works; so does an installed
package):

    PYTHONPATH=. arl train examples/guess_number.yaml    # env.name: examples.guess_number:make

`arl` reads the env's keys from the annotation of `make`'s first parameter, a dataclass that
extends `EnvConfig`: `env.low=1 env.high=50` work like any other key, and a misspelt
key fails before Ray starts.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from arl.config import EnvConfig
from arl.schema import opt
from arl.types import EnvReset, EnvStep, Message, Outcome, ParsedTurn, ToolCall, ToolSchema

GUESS = ToolSchema(
    name="guess",
    description="Guess the hidden number.",
    parameters={
        "type": "object",
        "properties": {"number": {"type": "integer", "description": "your guess"}},
        "required": ["number"],
        "additionalProperties": False,
    },
)


@dataclass
class GuessConfig(EnvConfig):
    low: int = opt(1, "the smallest number the env may hide")
    high: int = opt(20, "the largest number the env may hide")
    max_guesses: int = opt(5, "guesses before the episode ends", check="positive")
    reward_found: float = opt(1.0, "finding the number at the first guess")
    turn_cost: float = opt(0.1, "taken off reward_found for each earlier guess")
    reward_missed: float = opt(-0.5, "no guess found it")
    reward_invalid: float = opt(-1.0, "a malformed call, or a number outside [low, high]")
    show_interval: bool = opt(True, "each hint restates the interval the hints so far leave")
    reward_per_bit: float = opt(0.0, "per-turn reward for each bit a guess narrows the "
                                "interval by (potential-based shaping)", check="non_negative")
    shaping: str = opt("expected", "reward_per_bit pays the bits a guess narrows the interval "
                       "by on average over the numbers still possible (expected) or for this "
                       "number (realized)", choices=("expected", "realized"))


class GuessNumberEnv:
    """Implements `arl.protocols.Env`; one hidden number per seed."""

    def __init__(self, cfg: GuessConfig):
        if cfg.low > cfg.high:
            raise ValueError(f"env.low ({cfg.low}) is above env.high ({cfg.high})")
        self.cfg = cfg
        self._done: bool | None = None

    def reset(self, seed: int) -> EnvReset:
        self.secret = random.Random(seed).randint(self.cfg.low, self.cfg.high)
        self.guesses: list[int] = []
        self.interval = (self.cfg.low, self.cfg.high)
        self._done = False
        system = f"Find the hidden number. Reply with one {GUESS.name} tool call per turn."
        user = (f"I am thinking of a number from {self.cfg.low} to {self.cfg.high}. You have "
                f"{self.cfg.max_guesses} guesses.")
        return EnvReset((Message("system", system), Message("user", user)), (GUESS,))

    def step(self, turn: ParsedTurn) -> EnvStep:
        if self._done is None or self._done:
            raise RuntimeError("step() before reset() or after the episode ended")
        # What the agent knows so far: the interval and the guesses it has left.
        left = self.cfg.max_guesses - len(self.guesses)
        state = f"{self.interval[0]}-{self.interval[1]}, {left} left"
        number = self._number(turn)
        if number is None:
            return self._end("Invalid guess: name an integer from "
                             f"{self.cfg.low} to {self.cfg.high}.", "invalid",
                             self.cfg.reward_invalid, state)
        self.guesses.append(number)
        before = self.interval
        hint = "higher" if number < self.secret else "lower"
        low, high = before
        self.interval = ((number, number) if number == self.secret else
                         (max(low, number + 1), high) if hint == "higher" else
                         (low, min(high, number - 1)))
        shaping = self.cfg.reward_per_bit * (
            _expected_bits(before, number) if self.cfg.shaping == "expected"
            else _bits(before) - _bits(self.interval))
        if number == self.secret:
            reward = self.cfg.reward_found - self.cfg.turn_cost * (len(self.guesses) - 1)
            return self._end(f"{number} is right!", "found", reward + shaping, state)
        if len(self.guesses) == self.cfg.max_guesses:
            return self._end(f"{number} is wrong; it was {self.secret}.", "missed",
                             self.cfg.reward_missed + shaping, state)
        left -= 1
        known = f", so {self.interval[0]} to {self.interval[1]}" if self.cfg.show_interval else ""
        return EnvStep((Message("tool", f"{number}: {hint}{known}. {left} guesses left."),),
                       shaping, False, False, turn_state=state)

    def _number(self, turn: ParsedTurn) -> int | None:
        if not isinstance(turn, ToolCall) or turn.name != GUESS.name:
            return None
        value = turn.arguments.get("number")
        if type(value) is not int or not self.cfg.low <= value <= self.cfg.high:
            return None
        return value

    def _end(self, text: str, kind: str, reward: float, state: str) -> EnvStep:
        self._done = True
        result = {"found": "win", "missed": "loss", "invalid": "invalid"}[kind]
        outcome = Outcome(kind, result, tuple(self.guesses))
        return EnvStep((Message("tool", text),), float(reward), True, False, outcome,
                       turn_state=state)


def _bits(interval: tuple[int, int]) -> float:
    """log2 of the numbers an interval still holds (0 once one is left)."""
    return math.log2(max(interval[1] - interval[0] + 1, 1))


def _expected_bits(interval: tuple[int, int], number: int) -> float:
    """The bits a guess narrows `interval` by, averaged over the numbers it holds: found
    (1 in n) leaves one, "lower" the numbers below the guess, "higher" those above; a guess
    outside the interval narrows nothing."""
    low, high = interval
    if not low <= number <= high:
        return 0.0
    n = high - low + 1
    sides = (number - low, high - number)
    return _bits(interval) - sum(k / n * math.log2(k) for k in sides if k)


def reference(env: GuessNumberEnv, player: str, rng: random.Random) -> ToolCall:
    """The baselines' guesses: `random` a uniformly random legal one (the whole range, as the
    warm start guesses), `perfect` binary search (the middle of the interval still open)."""
    if player == "random":
        return ToolCall(GUESS.name, {"number": rng.randint(env.cfg.low, env.cfg.high)})
    if player == "perfect":
        return ToolCall(GUESS.name, {"number": sum(env.interval) // 2})
    raise ValueError(f"reference player must be random or perfect, got {player!r}")


def make(cfg: GuessConfig) -> GuessNumberEnv:
    """The factory `env.name=examples.guess_number:make` names."""
    return GuessNumberEnv(cfg)


make.outcomes = ("found", "missed", "invalid")  # logged as rollout/outcome_<kind>, 0 if absent
make.max_turns = 20  # the most turns an episode of any config may take (evaluation)
make.reference = reference  # the random and perfect rows of a results page
# Every legal guess, for a format warm start with uniformly random legal moves (`arl warmstart
# examples/guess_number_warmstart.yaml`): the whole range, not the interval still open, which
# would teach the strategy.
make.legal_calls = lambda env: [ToolCall(GUESS.name, {"number": n})
                                for n in range(env.cfg.low, env.cfg.high + 1)]
