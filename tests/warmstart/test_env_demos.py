"""Warm-start transcripts for any env that names its legal calls: the format and uniformly
random legal moves, exact counts, deterministic, every legal target legal where it is made."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspiel", reason="the openspiel extra: pip install -e '.[openspiel]'")

from arl.config import load_config  # noqa: E402
from arl.env_spec import resolve_env  # noqa: E402
from arl.tools import parse_tool_call  # noqa: E402
from arl.types import ToolCall  # noqa: E402
from arl.warmstart.env_demos import env_examples  # noqa: E402


def test_env_examples_are_legal_calls_or_mistakes_in_exact_numbers():
    cfg = load_config([], ["env.name=openspiel", "env.game=kuhn_poker"], check_paths=False).env
    spec = resolve_env("openspiel")
    demos = env_examples(spec, cfg, 200, seed=3, malformed_fraction=0.25)
    assert demos == env_examples(spec, cfg, 200, seed=3, malformed_fraction=0.25)
    assert sum(d.kind == "malformed" for d in demos) == 50
    multi_turn = 0
    for d in demos:
        parsed = parse_tool_call(d.target, d.reset.tools)
        if d.kind == "malformed":
            assert not isinstance(parsed, ToolCall), d.target  # every mistake fails to parse
            continue
        assert isinstance(parsed, ToolCall)
        legal = d.reset.messages[-1].content.split("Legal actions: ")[1]
        assert f"{parsed.arguments['action']} = " in legal  # one of the numbers listed
        multi_turn += any(m.role == "assistant" for m in d.reset.messages)
    assert multi_turn > 10  # some prompts are the middle of a hand
