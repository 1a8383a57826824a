"""Guess the number: a multi-turn env written outside arl, as a user would write one.

The agent has `max_guesses` turns to find a hidden integer in [low, high] with the tool
`guess(number)`; after each wrong guess the env says "higher" or "lower". Finding it earns
`reward_found` minus `turn_cost` per earlier guess, so halving the interval (binary search) is
the best policy; running out of guesses earns `reward_missed`, and a malformed call or a
number outside [low, high] ends the episode with `reward_invalid`.

Train it from the repository root (any folder on PYTHONPATH works; so does an installed
package):

    PYTHONPATH=. arl train examples/guess_number.yaml    # env.name: examples.guess_number:make

`arl` reads the env's keys from the annotation of `make`'s first parameter, a dataclass that
extends `EnvConfig`: `env.low=1 env.high=50` work like any other key, and a misspelt
key fails before Ray starts.
"""

from __future__ import annotations

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
        state = f"{self.interval[0]}-{self.interval[1]}"  # what the agent knows so far
        number = self._number(turn)
        if number is None:
            return self._end("Invalid guess: name an integer from "
                             f"{self.cfg.low} to {self.cfg.high}.", "invalid",
                             self.cfg.reward_invalid, state)
        self.guesses.append(number)
        if number == self.secret:
            reward = self.cfg.reward_found - self.cfg.turn_cost * (len(self.guesses) - 1)
            return self._end(f"{number} is right!", "found", reward, state)
        if len(self.guesses) == self.cfg.max_guesses:
            return self._end(f"{number} is wrong; it was {self.secret}.", "missed",
                             self.cfg.reward_missed, state)
        low, high = self.interval
        hint = "higher" if number < self.secret else "lower"
        self.interval = (max(low, number + 1), high) if hint == "higher" else (
            low, min(high, number - 1))
        left = self.cfg.max_guesses - len(self.guesses)
        return EnvStep((Message("tool", f"{number}: {hint}. {left} guesses left."),), 0.0,
                       False, False, turn_state=state)

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


def make(cfg: GuessConfig) -> GuessNumberEnv:
    """The factory `env.name=examples.guess_number:make` names."""
    return GuessNumberEnv(cfg)


make.outcomes = ("found", "missed", "invalid")  # logged as rollout/outcome_<kind>, 0 if absent
make.max_turns = 20  # the most turns an episode of any config may take (evaluation)
# Every legal guess, for a format warm start with uniformly random legal moves (`arl warmstart
# examples/guess_number_warmstart.yaml`): the whole range, not the interval still open, which
# would teach the strategy.
make.legal_calls = lambda env: [ToolCall(GUESS.name, {"number": n})
                                for n in range(env.cfg.low, env.cfg.high + 1)]
