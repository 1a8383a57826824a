"""Hostile model output through every env: 10,000 fuzzed replies, adversarial payloads
included. None may crash an env, change the board when it is invalid, or run as code."""

from __future__ import annotations

import json
import random

import pytest

from arl.envs.registry import env_config, make_env
from arl.episode import parse_turn
from arl.tools import format_tool_call
from arl.types import ToolCall

PAYLOADS = (
    "__import__('os').system('touch CANARY')",
    "eval(\"__import__('os').system('touch CANARY')\")",
    "$(touch CANARY)", "`touch CANARY`", "; touch CANARY", "{{7*7}}", "${jndi:ldap://x}",
    "1; DROP TABLE boards", "../../etc/passwd", "\x00", "\ud800", "🂡" * 50, "A" * 5000,
    "NaN", "Infinity", "-0", "1e309", "5.0", "true", "null", "[5]", '{"square": 5}',
)
ENVS = (
    env_config(name="tictactoe_move"),
    env_config(name="tictactoe", opponent="random", invalid_action="retry", max_retries=1),
    env_config(name="tictactoe", opponent="minimax", invalid_action="end"),
    env_config(name="connect_four", opponent="random", search_depth=1),
)


def _fuzzed_reply(rng: random.Random, tool: str, arg: str) -> str:
    """One hostile reply: a payload as the argument, as the name, as extra keys, raw, or a
    valid-looking call mangled at a random byte."""
    payload = rng.choice(PAYLOADS)
    choice = rng.randrange(7)
    if choice == 0:
        return format_tool_call(ToolCall(tool, {arg: payload}))
    if choice == 1:
        return format_tool_call(ToolCall(payload, {arg: 1}))
    if choice == 2:
        return format_tool_call(ToolCall(tool, {arg: 1, payload[:20]: payload}))
    if choice == 3:
        return payload
    if choice == 4:
        return f"<tool_call>{payload}</tool_call>"
    if choice == 5:
        body = json.dumps({"name": tool, "arguments": {arg: rng.randint(-10**20, 10**20)}})
        return f"<tool_call>{body}</tool_call>"
    text = format_tool_call(ToolCall(tool, {arg: rng.randint(1, 9)}))
    i = rng.randrange(len(text))
    return text[:i] + chr(rng.randrange(0x20, 0x3000)) + text[i + 1 :]


@pytest.mark.parametrize("cfg", ENVS, ids=lambda c: f"{c.name}-{vars(c).get('invalid_action')}")
def test_fuzzed_replies_never_crash_move_or_execute(cfg, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = random.Random(cfg.name)
    env = make_env(cfg)
    invalid = 0
    for i in range(2500):
        reset = env.reset(i)
        tool = reset.tools[0]
        arg = next(iter(tool.parameters["properties"]))
        text = _fuzzed_reply(rng, tool.name, arg)
        board = env.board
        step = env.step(parse_turn(text, rng.random() < 0.95, reset.tools))
        if "Invalid tool call" in step.messages[0].content or "Illegal" in step.messages[0].content:
            invalid += 1
            assert env.board == board, text
            assert step.reward == cfg.reward_invalid or not step.terminated
        assert all(isinstance(m.content, str) for m in step.messages)
    assert invalid > 2000  # nearly every reply is hostile; a few mangled calls stay valid
    assert not list(tmp_path.iterdir()), "a payload created a file"
