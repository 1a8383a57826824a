"""Warm-start transcripts for any env whose spec names its legal calls (`EnvSpec.legal_calls`).

The same honest recipe as the tic-tac-toe transcripts (arl/warmstart/demos.py): the format and
uniformly random legal moves, no strategy. An episode is played with uniformly random legal
calls for a uniformly random number of the agent's turns (redrawn if it ends there); the
conversation so far is the prompt, and the target is one more uniformly random legal call, or
(a `malformed_fraction` of them) a realistic mistake around one.
"""

from __future__ import annotations

import random

from arl.config import EnvConfig
from arl.env_spec import EnvSpec
from arl.tools import format_tool_call
from arl.types import EnvReset, Message, ToolCall
from arl.warmstart.demos import Demo, legal_or_malformed

MAX_PREFIX_TURNS = 8


def env_examples(spec: EnvSpec, cfg: EnvConfig, n: int, seed: int,
                 malformed_fraction: float) -> list[Demo]:
    """`n` demos of `spec`'s env under `cfg`, deterministic in `seed`: exactly
    round(n * malformed_fraction) malformed targets, the rest legal, in shuffled order."""
    if spec.legal_calls is None:
        raise ValueError(f"env {spec.name!r} does not name its legal calls (EnvSpec.legal_calls)")
    rng = random.Random(seed)
    kinds = legal_or_malformed(n, malformed_fraction, rng)
    env = spec.make(cfg)
    demos = []
    for kind in kinds:
        prompt = _prefix(spec, env, rng)
        call = rng.choice(spec.legal_calls(env))
        target = format_tool_call(call) if kind == "legal" else _malformed(call, rng)
        demos.append(Demo(prompt, target, kind))
    return demos


def _prefix(spec: EnvSpec, env, rng: random.Random) -> EnvReset:
    """Reset, play random legal calls for a random number of turns (each further turn with
    chance 1/2, at most MAX_PREFIX_TURNS; redrawn if the episode ends), return the chat so
    far."""
    while True:
        reset = env.reset(rng.randrange(2**31))
        messages, ended, turns = list(reset.messages), False, 0
        while not ended and turns < MAX_PREFIX_TURNS and rng.random() < 0.5:
            call = rng.choice(spec.legal_calls(env))
            step = env.step(call)
            messages += [Message("assistant", format_tool_call(call)), *step.messages]
            ended, turns = step.terminated or step.truncated, turns + 1
        if not ended:
            return EnvReset(messages=tuple(messages), tools=reset.tools)


def _malformed(call: ToolCall, rng: random.Random) -> str:
    """A realistic mistake around `call`: no closing tag, broken JSON, a wrong argument name,
    the value as a string, or plain text."""
    good = format_tool_call(call)
    name, value = next(iter(call.arguments.items()))
    families = (
        lambda: good.removesuffix("</tool_call>"),
        lambda: good.replace("}}", "}"),
        lambda: good.replace('"', "'"),
        lambda: format_tool_call(ToolCall(call.name, {f"{name}_": value})),
        lambda: format_tool_call(ToolCall(call.name, {name: str(value)})),
        lambda: f"I play {value}.",
    )
    return rng.choice(families)()
