"""Tool-call parsing: every accept path, every error kind, schema rendering, and a seeded fuzz
run whose invariants are: no exception escapes, one typed result per turn, and every ToolCall
satisfies an oracle written independently of `arl.tool_schema`."""

from __future__ import annotations

import json
import random

import pytest

from arl.tool_schema import validate_arguments
from arl.tools import (
    CALL_CLOSE,
    CALL_OPEN,
    format_tool_call,
    parse_tool_call,
)
from arl.types import ToolCall, ToolCallError, ToolCallErrorKind, ToolSchema

K = ToolCallErrorKind
SQUARE = ToolSchema(
    "choose_square",
    "Place your mark on a square.",
    {
        "type": "object",
        "properties": {
            "square": {
                "type": "integer",
                "minimum": 1,
                "maximum": 9,
                "description": "Square 1-9, row by row.",
            }
        },
        "required": ["square"],
        "additionalProperties": False,
    },
)
_SIDE = {"type": "integer", "minimum": 1, "maximum": 5}
OPTIONS = ToolSchema(
    "set_options",
    "Change the game options.",
    {
        "type": "object",
        "properties": {
            "mark": {"type": "string", "enum": ["X", "O"]},
            "note": {"type": "string", "maxLength": 20},
            "temperature": {"type": "number", "minimum": 0, "maximum": 2},
            "hard": {"type": "boolean"},
            "level": {"type": "integer", "enum": [1, 2, 3]},
            "grid": {
                "type": "object",
                "properties": {"rows": _SIDE, "cols": _SIDE},
                "required": ["rows", "cols"],
            },
            "squares": {
                "type": "array",
                "items": SQUARE.parameters["properties"]["square"],
                "maxItems": 3,
            },
        },
        "required": ["mark"],
    },
)
RESIGN = ToolSchema("resign", "Give up.", {"type": "object", "properties": {}})
TOOLS = (SQUARE, OPTIONS, RESIGN)


def call(name: str, arguments: object, **extra: object) -> str:
    return CALL_OPEN + json.dumps({"name": name, "arguments": arguments, **extra}) + CALL_CLOSE


def opt(**arguments: object) -> str:
    """A set_options call with a valid mark plus `arguments`."""
    return call("set_options", {"mark": "X", **arguments})


def sq(value: object) -> str:
    return call("choose_square", {"square": value})


def _is_int(v: object, lo: int, hi: int) -> bool:
    return type(v) is int and lo <= v <= hi


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def oracle_accepts(result: ToolCall) -> bool:
    """The schemas above, checked by hand: independent of the validator under test."""
    args = result.arguments
    if result.name == "choose_square":
        return set(args) == {"square"} and _is_int(args["square"], 1, 9)
    if result.name == "resign":
        return args == {}
    if result.name != "set_options" or "mark" not in args:
        return False
    checks = {
        "mark": lambda v: v in ("X", "O") and type(v) is str,
        "note": lambda v: type(v) is str and len(v) <= 20 and _utf8(v),
        "temperature": lambda v: type(v) in (int, float) and 0 <= v <= 2,
        "hard": lambda v: type(v) is bool,
        "level": lambda v: _is_int(v, 1, 3),
        "grid": lambda v: (
            type(v) is dict
            and set(v) == {"rows", "cols"}
            and all(_is_int(x, 1, 5) for x in v.values())
        ),
        "squares": lambda v: type(v) is list and len(v) <= 3 and all(_is_int(x, 1, 9) for x in v),
    }
    return all(key in checks and checks[key](value) for key, value in args.items())


def check_result(text: str, result: object) -> None:
    """The contract every parse must meet, whatever the input."""
    assert type(result) in (ToolCall, ToolCallError)
    if isinstance(result, ToolCall):
        assert oracle_accepts(result), (text[:200], result)
        assert parse_tool_call(format_tool_call(result), TOOLS) == result
        return
    assert isinstance(result.kind, ToolCallErrorKind) and result.kind is not K.TRUNCATED
    message = result.message
    assert type(message) is str and 0 < len(message) <= 300, message
    assert message.isprintable(), message  # one line, no control chars or lone surrogates
    assert CALL_OPEN not in message and CALL_CLOSE not in message


# ---------------------------------------------------------------- accept paths

_WS_CALL = '<tool_call>\n {"name": "choose_square", "arguments": {"square": 1}} \n</tool_call>\n\n'
_UNICODE_CALL = (
    '<tool_call>{"name": "set_options", "arguments": {"mark": "X", "note": "é中🙂\\u00e9"}}'
    "</tool_call>"
)
_BRACKETS = "[[[[[[[[[[{{{{{{{{{{"  # brackets inside strings do not count as nesting
ACCEPTED = [
    (format_tool_call(ToolCall("choose_square", {"square": 5})), "choose_square", {"square": 5}),
    ("Center is strongest.\n" + sq(5), "choose_square", {"square": 5}),
    (_WS_CALL, "choose_square", {"square": 1}),
    ("{} [ ] </b> " + sq(9) + " \t\r\n", "choose_square", {"square": 9}),
    (call("resign", {}), "resign", {}),
    (opt(temperature=1), "set_options", {"mark": "X", "temperature": 1}),
    (
        opt(note=_BRACKETS, hard=False),
        "set_options",
        {"mark": "X", "note": _BRACKETS, "hard": False},
    ),
    (_UNICODE_CALL, "set_options", {"mark": "X", "note": "é中🙂é"}),
]
FULL_OPTIONS = {
    "mark": "X",
    "note": "hi",
    "temperature": 0.5,
    "hard": True,
    "level": 3,
    "grid": {"rows": 3, "cols": 5},
    "squares": [1, 9],
}


@pytest.mark.parametrize(
    ("text", "name", "arguments"), ACCEPTED, ids=[f"accept-{i}" for i in range(len(ACCEPTED))]
)
def test_accepts(text: str, name: str, arguments: dict[str, object]) -> None:
    assert parse_tool_call(text, TOOLS) == ToolCall(name, arguments)


def test_format_tool_call_round_trips() -> None:
    calls = [ToolCall("choose_square", {"square": k}) for k in range(1, 10)]
    calls += [ToolCall("set_options", FULL_OPTIONS), ToolCall("resign", {})]
    for expected in calls:
        assert parse_tool_call(format_tool_call(expected), TOOLS) == expected


def test_caps_are_inclusive() -> None:
    nested = call("set_options", FULL_OPTIONS)  # call object > arguments > grid: depth 3
    assert isinstance(parse_tool_call(nested, TOOLS, max_depth=3), ToolCall)
    assert parse_tool_call(nested, TOOLS, max_depth=2).kind is K.TOO_LARGE
    body_len = len(nested) - len(CALL_OPEN) - len(CALL_CLOSE)
    assert isinstance(parse_tool_call(nested, TOOLS, max_chars=body_len), ToolCall)
    assert parse_tool_call(nested, TOOLS, max_chars=body_len - 1).kind is K.TOO_LARGE


# ---------------------------------------------------------------- error kinds

_OK = '{"name": "choose_square", "arguments": {"square": 5}}'
REJECTED = [
    ("", K.MISSING, ""),
    ("I pick square 5.", K.MISSING, ""),
    (_OK, K.MISSING, ""),
    (f"<TOOL_CALL>{_OK}</TOOL_CALL>", K.MISSING, ""),
    (f"{CALL_OPEN}{_OK}", K.MALFORMED, "closing"),
    (f"{_OK}{CALL_CLOSE}", K.MALFORMED, "opening"),
    (f"{CALL_CLOSE}{CALL_OPEN}{_OK}", K.MALFORMED, "unbalanced"),
    (f"{CALL_OPEN}{_OK}{CALL_CLOSE}{CALL_CLOSE}", K.MALFORMED, "unbalanced"),
    (f"{CALL_OPEN} \n {CALL_CLOSE}", K.MALFORMED, "empty"),
    (sq(5).replace("5", "NaN"), K.MALFORMED, "NaN"),
    (sq(5).replace("5", "Infinity"), K.MALFORMED, "Infinity"),
    (sq(5).replace("5", "-Infinity"), K.MALFORMED, "Infinity"),
    (sq(5).replace("5", "1e400"), K.MALFORMED, "too large"),
    (sq(5).replace("5", '5, "square": 6'), K.MALFORMED, "duplicate key 'square'"),
    (
        f'{CALL_OPEN}{{"name": "resign", "name": "resign", "arguments": {{}}}}{CALL_CLOSE}',
        K.MALFORMED,
        "duplicate",
    ),
    (
        f"{CALL_OPEN}{{'name': 'choose_square', 'arguments': {{'square': 5}}}}{CALL_CLOSE}",
        K.MALFORMED,
        "not valid JSON",
    ),
    (f'{CALL_OPEN}{{"name": "resign", "arguments": {{}},}}{CALL_CLOSE}', K.MALFORMED, "JSON"),
    (f"{CALL_OPEN}__import__('os').system('x'){CALL_CLOSE}", K.MALFORMED, "JSON"),
    (f"{CALL_OPEN}[{_OK}]{CALL_CLOSE}", K.MALFORMED, "object"),
    (f'{CALL_OPEN}"choose_square"{CALL_CLOSE}', K.MALFORMED, "object"),
    (f'{CALL_OPEN}{{"arguments": {{"square": 5}}}}{CALL_CLOSE}', K.MALFORMED, "'name'"),
    (f'{CALL_OPEN}{{"name": "resign"}}{CALL_CLOSE}', K.MALFORMED, "'arguments'"),
    (call("resign", {}, id="1"), K.MALFORMED, "'id'"),
    (f'{CALL_OPEN}{{"name": 7, "arguments": {{}}}}{CALL_CLOSE}', K.MALFORMED, "string"),
    (f'{CALL_OPEN}{{"name": "re\tsign", "arguments": {{}}}}{CALL_CLOSE}', K.MALFORMED, "JSON"),
    (opt(note="x" * 3000), K.TOO_LARGE, "2048"),
    (f"{CALL_OPEN}{'[' * 9}{']' * 9}{CALL_CLOSE}", K.TOO_LARGE, "8 levels"),
    (f"{CALL_OPEN}{'[' * 10_000}{CALL_CLOSE}", K.TOO_LARGE, ""),
    (sq(5) + sq(6), K.MULTIPLE, "2"),
    (sq(5) + " or maybe " + sq(6) + "\n" + sq(7), K.MULTIPLE, "3"),
    (f"{CALL_OPEN}{CALL_OPEN}{_OK}{CALL_CLOSE}", K.MULTIPLE, ""),
    (sq(5) + " Done!", K.TRAILING_TEXT, "'Done!'"),
    (sq(5) + "\n\u00a0", K.TRAILING_TEXT, ""),
    (sq(5) + "\x00", K.TRAILING_TEXT, "\\x00"),
    (sq(5) + "y" * 1000, K.TRAILING_TEXT, "..."),
    (call("choose_squares", {"square": 5}), K.UNKNOWN_TOOL, "choose_squares"),
    (call("Choose_Square", {"square": 5}), K.UNKNOWN_TOOL, "available: choose_square"),
    (call("", {}), K.UNKNOWN_TOOL, "''"),
    (call("\ud800", {}), K.UNKNOWN_TOOL, "\\ud800"),
    (call("choose_square", '{"square": 5}'), K.INVALID_ARGUMENTS, "object"),
    (call("choose_square", [5]), K.INVALID_ARGUMENTS, "object"),
    (call("choose_square", None), K.INVALID_ARGUMENTS, "object"),
    (call("choose_square", {}), K.INVALID_ARGUMENTS, "missing required argument 'square'"),
    (call("choose_square", {"square": 5, "mark": "X"}), K.INVALID_ARGUMENTS, "'mark'"),
    (sq(0), K.INVALID_ARGUMENTS, "argument 'square' must be at least 1"),
    (sq(10), K.INVALID_ARGUMENTS, "at most 9"),
    (sq(5.0), K.INVALID_ARGUMENTS, "must be an integer, got 5.0"),
    (sq(True), K.INVALID_ARGUMENTS, "got true"),
    (sq("5"), K.INVALID_ARGUMENTS, "got '5'"),
    (sq(None), K.INVALID_ARGUMENTS, "got null"),
    (sq(10**400), K.INVALID_ARGUMENTS, "very large"),
    (sq(-(10**400)), K.INVALID_ARGUMENTS, "at least 1"),
    (sq("__import__('os')"), K.INVALID_ARGUMENTS, "'square'"),
    (opt(mark="x"), K.INVALID_ARGUMENTS, "'mark' must be one of 'X', 'O'"),
    (opt(note="n" * 21), K.INVALID_ARGUMENTS, "'note'"),
    (opt(note="\ud800"), K.INVALID_ARGUMENTS, "unicode"),
    (opt(temperature=2.5), K.INVALID_ARGUMENTS, "'temperature'"),
    (opt(temperature="1"), K.INVALID_ARGUMENTS, "a number"),
    (opt(hard=1), K.INVALID_ARGUMENTS, "'hard' must be a boolean"),
    (opt(level=2.0), K.INVALID_ARGUMENTS, "'level'"),
    (opt(level=True), K.INVALID_ARGUMENTS, "'level'"),
    (opt(grid={"rows": 2}), K.INVALID_ARGUMENTS, "'grid.cols'"),
    (opt(grid={"rows": 6, "cols": 1}), K.INVALID_ARGUMENTS, "'grid.rows'"),
    (opt(grid={"rows": 1, "cols": 1, "z": 1}), K.INVALID_ARGUMENTS, "'z' in argument 'grid'"),
    (opt(squares=[1, 10]), K.INVALID_ARGUMENTS, "'squares[1]'"),
    (opt(squares=[1, 2, 3, 4]), K.INVALID_ARGUMENTS, "at most 3 items"),
    (call("resign", {"now": True}), K.INVALID_ARGUMENTS, "'now'"),
]


@pytest.mark.parametrize(
    ("text", "kind", "in_message"),
    REJECTED,
    ids=[f"{kind.value}-{i}" for i, (_, kind, _) in enumerate(REJECTED)],
)
def test_rejects(text: str, kind: ToolCallErrorKind, in_message: str) -> None:
    result = parse_tool_call(text, TOOLS)
    assert isinstance(result, ToolCallError) and result.kind is kind, result
    assert in_message in result.message
    check_result(text, result)


def test_recursion_error_is_contained_when_caps_are_raised() -> None:
    """With the caps lifted the decoder itself hits its recursion limit: still a result."""
    for body in ("[" * 20_000 + "]" * 20_000, '{"a":' * 20_000, "[" * 20_000):
        result = parse_tool_call(
            CALL_OPEN + body + CALL_CLOSE, TOOLS, max_chars=10**7, max_depth=10**7
        )
        assert isinstance(result, ToolCallError) and result.kind is K.TOO_LARGE


def test_non_text_is_malformed() -> None:
    assert parse_tool_call(b"<tool_call>", TOOLS).kind is K.MALFORMED  # type: ignore[arg-type]


# ---------------------------------------------------------------- validator and rendering


def test_validator_is_type_strict_and_fails_closed() -> None:
    level = {"type": "object", "properties": {"level": {"type": "number", "enum": [1]}}}
    assert validate_arguments(level, {"level": 1}) is None
    assert validate_arguments(level, {"level": 1.0}) == "argument 'level' must be one of 1; got 1.0"
    assert "must be a number, got true" in validate_arguments(level, {"level": True})
    pattern = {"type": "object", "properties": {"s": {"type": "string", "pattern": "^a$"}}}
    assert "unsupported keyword 'pattern'" in validate_arguments(pattern, {"s": "b"})
    odd = {"type": "object", "properties": {"s": {"type": "null"}}}
    assert "not supported" in validate_arguments(odd, {"s": None})
    assert validate_arguments(SQUARE.parameters, []) == "arguments must be an object, got an array"


# ---------------------------------------------------------------- fuzz

_UNICODE = "\x00\x01\x1b\x7f\ud800\udfff\u2028\ufeff\u00a0é中🙂\\\"'<>/{}[],:"
_JSONISH = '{}[]":,0123456789.eE+-truefalsnl \\\t\n'
_LEAD = ["", "Thinking... ", "{}", "</b>", "\n", "<tool_call", "tool_call>"]
_TAIL = ["", " ", "\n", ".", "<|im_end|>", CALL_CLOSE, CALL_OPEN, "\x00", "</tool_call"]


def _random_text(rng: random.Random) -> str:
    alphabet = rng.choice([_UNICODE, _JSONISH, "<tool_call>/ ", "".join(map(chr, range(128)))])
    text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(80)))
    return CALL_OPEN + text + CALL_CLOSE if rng.random() < 0.5 else text


def _random_value(rng: random.Random, depth: int = 0) -> object:
    pick = rng.randrange(13 if depth < 4 else 8)
    if pick == 12:  # deep or long: around the caps
        nested: object = 0
        for _ in range(rng.randint(1, 10)):
            nested = [nested]
        return rng.choice([nested, "x" * 3000])
    scalars = [
        rng.randint(-3, 12),
        rng.choice([10**400, -(10**30), 2**63]),
        rng.random() * 3,
        rng.choice(["X", "O", "5", "", "é" * 25, "__import__('os')"]),
        rng.random() < 0.5,
        None,
        rng.choice([1.0, 5.0, -0.0]),
        rng.randint(1, 9),
    ]
    if pick < 8:
        return scalars[pick]
    if pick < 10:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(5))]
    return _random_arguments(rng, depth + 1)


def _random_arguments(rng: random.Random, depth: int = 0) -> dict[str, object]:
    keys = [
        "square",
        "mark",
        "note",
        "temperature",
        "hard",
        "level",
        "grid",
        "squares",
        "rows",
        "cols",
        "x",
    ]
    args = {rng.choice(keys): _random_value(rng, depth) for _ in range(rng.randrange(4))}
    if rng.random() < 0.5:
        args["mark"] = rng.choice(["X", "O"])
    return args


def _likely_valid_call(rng: random.Random) -> dict[str, object]:
    """Mostly valid calls, so the fuzz also drives the accept path hard."""
    if rng.random() < 0.5:
        return {"name": "choose_square", "arguments": {"square": rng.randint(0, 10)}}
    options = {key: value for key, value in FULL_OPTIONS.items() if rng.random() < 0.5}
    options["mark"] = rng.choice(["X", "O", "x"])
    options["squares"] = [rng.randint(1, 10) for _ in range(rng.randrange(4))]
    options["note"] = "".join(rng.choice(_UNICODE) for _ in range(rng.randrange(22)))
    return {"name": "set_options", "arguments": options}


def _random_call(rng: random.Random) -> str:
    name = rng.choice(["choose_square", "set_options", "resign", "rm -rf", "choose_square "])
    envelope = {"name": name, "arguments": _random_arguments(rng)}
    if rng.random() < 0.4:
        envelope = _likely_valid_call(rng)
    if rng.random() < 0.05:
        envelope = rng.choice([{"name": name}, {**envelope, "id": 1}, [envelope]])
    body = json.dumps(envelope, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 1]))
    tail = rng.choice(_TAIL) if rng.random() < 0.3 else rng.choice(["", " \n"])
    return rng.choice(_LEAD) + CALL_OPEN + body + CALL_CLOSE + tail


def _mutate(rng: random.Random, text: str) -> str:
    chars = list(text)
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(chars) + 1)
        op = rng.randrange(4)
        if op == 0 and i < len(chars):
            del chars[i]
        elif op == 1:
            chars.insert(i, rng.choice(_UNICODE + _JSONISH))
        elif op == 2 and i + 1 < len(chars):
            chars[i], chars[i + 1] = chars[i + 1], chars[i]
        elif op == 3:  # cut: a truncated turn
            chars = chars[:i]
    return "".join(chars)


ADVERSARIAL = [
    "a" * 1_000_000,
    CALL_OPEN + "x" * 1_000_000 + CALL_CLOSE,
    "y" * 1_000_000 + sq(5),
    sq(5) + " " * 1_000_000,
    sq(5) + "z" * 1_000_000,
    CALL_OPEN + "[" * 10_000 + CALL_CLOSE,
    CALL_OPEN + '{"a":' * 10_000 + CALL_CLOSE,
    CALL_OPEN + "__import__('os').system('x')" + CALL_CLOSE,
    "__import__('os').system('x')",
    sq("__import__('os')"),
    (CALL_OPEN + "\x00" + CALL_CLOSE) * 3,
    CALL_OPEN + "\ud800\udfff" + CALL_CLOSE,
    CALL_OPEN + "\\" + CALL_CLOSE,
    CALL_OPEN + '"\\' + CALL_CLOSE,
    sq(5).replace("5", "1" * 5000),
    sq(5).replace("5", "1e400"),
    sq(5).replace("5", "-1e-400"),
    "".join(map(chr, range(0xD7FF))),
]


def test_fuzz_never_raises_and_every_call_validates() -> None:
    rng = random.Random(20240531)
    seeds = [sq(k) for k in range(1, 10)] + [call("set_options", FULL_OPTIONS), call("resign", {})]
    texts = list(ADVERSARIAL)
    for _ in range(12_000):
        pick = rng.randrange(4)
        if pick == 0:
            texts.append(_random_text(rng))
        elif pick == 1:
            texts.append(_random_call(rng))
        else:
            texts.append(_mutate(rng, rng.choice(seeds) if pick == 2 else _random_call(rng)))
    kinds: dict[object, int] = {}
    for text in texts:
        result = parse_tool_call(text, TOOLS)
        check_result(text, result)
        assert parse_tool_call(text, TOOLS) == result  # deterministic
        key = result.kind if isinstance(result, ToolCallError) else ToolCall
        kinds[key] = kinds.get(key, 0) + 1
    # The fuzz reaches every outcome, so the invariants above were tested on each path.
    assert set(kinds) == {ToolCall, *K} - {K.TRUNCATED}, kinds
    assert kinds[ToolCall] > 500, kinds
