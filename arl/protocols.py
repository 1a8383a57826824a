"""Protocols at the seams: environments and rollout engines.

Implementations live in `arl/envs/` and `arl/rollout/engines/`; the core only depends on these
shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

from arl.types import EnvReset, EnvStep, Generation, ParsedTurn, SamplingParams


@runtime_checkable
class Env(Protocol):
    """A multi-turn, text, tool-calling environment.

    Contract:
    - `reset(seed)` starts a new episode; the same seed gives the same episode (board and
      opponent randomness included) and discards any previous episode.
    - `step(turn)` takes the parse result of one model turn: a validated ToolCall, or a
      ToolCallError that the env must turn into an observation (never raise on it).
      It returns the env's reply messages (never trained on), the reward for this step,
      and whether the episode terminated (game over) or was truncated (turn budget).
    - `step` after the episode ended raises RuntimeError.
    """

    def reset(self, seed: int) -> EnvReset: ...

    def step(self, turn: ParsedTurn) -> EnvStep: ...


@runtime_checkable
class RolloutEngine(Protocol):
    """An inference engine that samples turns for many concurrent episodes.

    Contract:
    - `generate(prompts, params)` returns one Generation per prompt, in order; prompts are
      token-id lists of any lengths; generation stops at a stop id or after max_new_tokens.
      The same prompts, params (seed included) and weights give the same result.
    - `update_weights(weights, version)` replaces all weights in one call (HF parameter
      names; values are numpy arrays or tensors) and records `version`.
    - `version` is the policy_version of the weights currently loaded.
    - `get_tokenizer()` returns the HF tokenizer of the model (its chat template renders
      the prompts).
    """

    version: int

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]: ...

    def update_weights(self, weights: Mapping[str, Any], version: int) -> None: ...

    def get_tokenizer(self) -> Any: ...
