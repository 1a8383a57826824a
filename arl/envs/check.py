"""A conformance checker that every env must pass: `check_env(factory, seeds)`.

It checks the `arl.protocols.Env` contract plus what the episode loop relies on, and raises
`EnvCheckError` (an AssertionError) naming the seed and the first violation.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from arl.config import EnvConfig
from arl.env_spec import EnvSpec
from arl.protocols import Env
from arl.types import (
    EnvReset,
    EnvStep,
    Message,
    Outcome,
    ParsedTurn,
    ToolCall,
    ToolCallError,
    ToolCallErrorKind,
    ToolSchema,
)

ROLES = ("system", "user", "assistant", "tool")


class EnvCheckError(AssertionError):
    """An env broke its contract; the message says where and how."""


def _require(ok: bool, what: str) -> None:
    if not ok:
        raise EnvCheckError(what)


def check_env(env_factory: Callable[[], Env], seeds: Iterable[int] = range(5),
              max_steps: int = 200, outcomes: Sequence[str] = ()) -> None:
    """Run every check on fresh envs from `env_factory`, for each seed; raise on the first
    violation. `max_steps` bounds an episode played by a random player; `outcomes`, if
    given, are the only `Outcome.kind`s allowed (`EnvSpec.outcomes`)."""
    env = env_factory()
    kinds = tuple(outcomes)
    for seed in seeds:
        first = env.reset(seed)
        _check_reset(first, f"seed {seed}: reset")
        _require(env.reset(seed) == first, f"seed {seed}: reset is not deterministic")
        _require(env_factory().reset(seed) == first,
                 f"seed {seed}: reset differs between env instances")
        for name, turn in _odd_turns(first.tools[0]):
            env.reset(seed)
            step = _step(env, turn, f"seed {seed}: step({name})", kinds)
            if step.terminated or step.truncated:
                _require_raises_after_end(env, f"seed {seed}: after step({name})")
        turns, steps = _random_episode(env, seed, max_steps, kinds)
        _require_raises_after_end(env, f"seed {seed}: after a random episode")
        env.reset(seed)
        replay = [_step(env, turn, f"seed {seed}: replay", kinds) for turn in turns]
        _require(replay == steps,
                 f"seed {seed}: the same seed and turns gave a different episode")


def _check_reset(reset: Any, where: str) -> None:
    _require(isinstance(reset, EnvReset), f"{where}: returned {type(reset).__name__}")
    _check_messages(reset.messages, where)
    _require(len(reset.messages) > 0 and reset.messages[-1].role == "user",
             f"{where}: the opening must end with a user message (the model answers next)")
    _require(isinstance(reset.tools, tuple) and len(reset.tools) > 0,
             f"{where}: tools must be a non-empty tuple")
    for tool in reset.tools:
        _check_tool(tool, where)


def _check_messages(messages: Any, where: str) -> None:
    _require(isinstance(messages, tuple), f"{where}: messages must be a tuple")
    for m in messages:
        _require(isinstance(m, Message), f"{where}: {m!r} is not a Message")
        _require(m.role in ROLES, f"{where}: bad role {m.role!r}")
        _require(isinstance(m.content, str) and m.content.strip() != "",
                 f"{where}: empty or non-text content in a {m.role} message")


def _check_tool(tool: Any, where: str) -> None:
    _require(isinstance(tool, ToolSchema), f"{where}: {tool!r} is not a ToolSchema")
    _require(bool(tool.name) and bool(tool.description), f"{where}: tool without name/description")
    params = tool.parameters
    _require(isinstance(params, dict) and params.get("type") == "object",
             f"{where}: tool {tool.name} parameters must be a JSON-schema object")
    props = params.get("properties")
    _require(isinstance(props, dict), f"{where}: tool {tool.name} has no properties dict")
    required = params.get("required", [])
    _require(isinstance(required, list) and set(required) <= set(props),
             f"{where}: tool {tool.name} requires unknown properties {required}")
    for name, prop in props.items():
        _require(isinstance(prop, dict) and "type" in prop,
                 f"{where}: property {name} of {tool.name} has no type")
    try:
        json.dumps(tool.as_dict())
    except (TypeError, ValueError) as err:
        raise EnvCheckError(f"{where}: tool {tool.name} is not JSON-serialisable: {err}") from None


def _step(env: Env, turn: ParsedTurn, where: str, outcomes: tuple[str, ...] = ()) -> EnvStep:
    try:
        step = env.step(turn)
    except Exception as err:  # noqa: BLE001 - any raise on a turn is a contract violation
        raise EnvCheckError(f"{where} raised {type(err).__name__}: {err}") from err
    _require(isinstance(step, EnvStep), f"{where}: returned {type(step).__name__}")
    _check_messages(step.messages, where)
    _require(isinstance(step.reward, float) and math.isfinite(step.reward),
             f"{where}: reward {step.reward!r} is not a finite float")
    _require(isinstance(step.terminated, bool) and isinstance(step.truncated, bool),
             f"{where}: terminated/truncated must be bools")
    ended = step.terminated or step.truncated
    _require(step.outcome is None or isinstance(step.outcome, Outcome),
             f"{where}: outcome must be an arl.types.Outcome or None")
    _require(not ended or step.outcome is not None,
             f"{where}: the step that ends an episode must report its Outcome")
    if step.outcome is not None:
        _require(all(type(a) is int for a in step.outcome.actions),
                 f"{where}: Outcome.actions must be ints")
        _require(not outcomes or step.outcome.kind in outcomes,
                 f"{where}: outcome kind {step.outcome.kind!r} is not one of the spec's "
                 f"{list(outcomes)}")
    return step


def _require_raises_after_end(env: Env, where: str) -> None:
    try:
        env.step(ToolCallError(ToolCallErrorKind.MISSING, "check"))
    except RuntimeError:
        return
    except Exception as err:  # noqa: BLE001
        raise EnvCheckError(f"{where}: step raised {type(err).__name__}, not RuntimeError") from err
    raise EnvCheckError(f"{where}: step after the end did not raise RuntimeError")


def _odd_turns(tool: ToolSchema) -> list[tuple[str, ParsedTurn]]:
    """Every error kind, another tool, and arguments the schema forbids."""
    turns: list[tuple[str, ParsedTurn]] = [
        (kind.value, ToolCallError(kind, "check")) for kind in ToolCallErrorKind
    ]
    turns.append(("wrong tool", ToolCall(tool.name + "_nope", {})))
    turns.append(("no arguments", ToolCall(tool.name, {})))
    props = tool.parameters["properties"]
    good = _random_arguments(tool, random.Random(0))
    turns.append(("extra argument", ToolCall(tool.name, {**good, "extra": 1})))
    for name, prop in props.items():
        turns.append((f"{name} as text", ToolCall(tool.name, {**good, name: "five"})))
        if prop.get("type") == "integer":
            low, high = prop.get("minimum", 0), prop.get("maximum", 9)
            for bad in (low - 1, high + 1):
                turns.append((f"{name}={bad}", ToolCall(tool.name, {**good, name: bad})))
    return turns


def _random_arguments(tool: ToolSchema, rng: random.Random) -> dict[str, Any]:
    args: dict[str, Any] = {}
    for name, prop in tool.parameters["properties"].items():
        if "enum" in prop:
            args[name] = rng.choice(prop["enum"])
        elif prop.get("type") == "integer":
            args[name] = rng.randint(prop.get("minimum", 0), prop.get("maximum", 9))
        else:
            args[name] = "x"
    return args


def check_spec(spec: EnvSpec, cfg: EnvConfig, seeds: Iterable[int] = range(5),
               max_steps: int = 200) -> None:
    """check_env on the envs `spec` builds from `cfg`, allowing only the spec's outcomes."""
    check_env(lambda: spec.make(cfg), seeds, max_steps, spec.outcomes)


def _random_episode(env: Env, seed: int, max_steps: int,
                    outcomes: tuple[str, ...]) -> tuple[list, list[EnvStep]]:
    """Play a random player (mostly in-range calls, some errors) until the episode ends."""
    rng = random.Random(seed)
    tool = env.reset(seed).tools[0]
    turns: list[ParsedTurn] = []
    steps: list[EnvStep] = []
    kinds = list(ToolCallErrorKind)
    for _ in range(max_steps):
        roll = rng.random()
        if roll < 0.1:
            turn: ParsedTurn = ToolCallError(rng.choice(kinds), "random player")
        else:
            turn = ToolCall(tool.name, _random_arguments(tool, rng))
        step = _step(env, turn, f"seed {seed}: random episode step {len(steps)}", outcomes)
        turns.append(turn)
        steps.append(step)
        if step.terminated or step.truncated:
            return turns, steps
    raise EnvCheckError(f"seed {seed}: no end within {max_steps} steps of a random player")
