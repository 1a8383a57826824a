"""Tool schemas and tool calls in the Hermes/Qwen style: `<tool_call>{json}</tool_call>`.

Model output is data: it is parsed with `json` only and validated against the tool's schema
(`arl.tool_schema`). A turn holds at most one call and ends at it (docs/ARCHITECTURE.md,
Lessons: a reward that ignores text after the call lets the policy drift into junk).

A turn is judged in this order; the first failure is the result:
  1. tags       no opening tag → MISSING; a stray, missing or repeated closing tag → MALFORMED;
                two or more opening tags → MULTIPLE; non-whitespace after the call → TRAILING_TEXT
  2. size       body longer than `max_chars`, or nested deeper than `max_depth` → TOO_LARGE
  3. JSON       not strict JSON (NaN/Infinity, floats that overflow, duplicate keys) → MALFORMED
  4. envelope   not an object with exactly `name` (a string) and `arguments` → MALFORMED
  5. tool       `name` is not one of the offered tools → UNKNOWN_TOOL
  6. arguments  not an object, or fails the tool's schema → INVALID_ARGUMENTS
`arguments` is always required, `{}` for a tool without parameters: one call shape, no special
case. TRUNCATED is never returned here: only the engine knows that a turn hit
`max_new_tokens`, so the episode loop reports it and does not parse such a turn.
The tags are reserved text (single special tokens for Qwen): a tag inside a JSON string
counts as a tag.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from typing import Any

from arl.tool_schema import safe_snippet, validate_arguments
from arl.types import ToolCall, ToolCallError, ToolCallErrorKind, ToolSchema

__all__ = [
    "CALL_CLOSE",
    "CALL_OPEN",
    "format_tool_call",
    "parse_tool_call",
    "validate_arguments",
]

CALL_OPEN = "<tool_call>"
CALL_CLOSE = "</tool_call>"

_JSON_WS = " \t\n\r"  # the whitespace JSON itself allows; other unicode spaces are text
# Tokens that matter for nesting depth: an escape (skipped whole), a quote, a bracket.
_STRUCTURE = re.compile(r'\\.|["\[\]{}]', re.DOTALL)
_Kind = ToolCallErrorKind


def format_tool_call(call: ToolCall) -> str:
    """The exact text of a well-formed call, as a model should emit it."""
    body = json.dumps({"name": call.name, "arguments": call.arguments})
    return f"{CALL_OPEN}{body}{CALL_CLOSE}"


def parse_tool_call(
    text: str, tools: Sequence[ToolSchema], *, max_chars: int = 2048, max_depth: int = 8
) -> ToolCall | ToolCallError:
    """Parse one model turn (decoded, without the end-of-turn token) into exactly one result.

    Returns a ToolCall whose name is one of `tools` and whose arguments satisfy that tool's
    schema, or a ToolCallError whose message is short, one line, tag-free and safe to show the
    model. Never raises for a `str` (a non-str is MALFORMED). `max_chars` caps the text between
    the tags; `max_depth` caps nested arrays/objects, counting the call object itself as 1.
    """
    if not isinstance(text, str):
        return ToolCallError(_Kind.MALFORMED, "the turn is not text")
    body = _extract_body(text)
    if isinstance(body, ToolCallError):
        return body
    value = _decode_body(body, max_chars, max_depth)
    if isinstance(value, ToolCallError):
        return value
    return _call_from_value(value, {tool.name: tool for tool in tools})


def _extract_body(text: str) -> str | ToolCallError:
    """The raw text between the one pair of tags, or the structural error."""
    opens, closes = text.count(CALL_OPEN), text.count(CALL_CLOSE)
    if opens == 0:
        if closes:
            return ToolCallError(_Kind.MALFORMED, "closing tool_call tag without an opening tag")
        return ToolCallError(_Kind.MISSING, "no tool call found; call exactly one tool")
    if opens > 1:
        return ToolCallError(_Kind.MULTIPLE, f"found {opens} tool calls; make exactly one per turn")
    if closes == 0:
        return ToolCallError(_Kind.MALFORMED, "tool call is not closed; add the closing tag")
    start = text.index(CALL_OPEN) + len(CALL_OPEN)
    end = text.find(CALL_CLOSE, start)
    if closes > 1 or end < 0:
        return ToolCallError(_Kind.MALFORMED, "tool_call tags are unbalanced")
    trailing = text[end + len(CALL_CLOSE) :].strip(_JSON_WS)
    if trailing:
        return ToolCallError(
            _Kind.TRAILING_TEXT,
            f"text after the tool call: {safe_snippet(trailing)}; end the turn at the call",
        )
    return text[start:end]


class _StrictJSONError(ValueError):
    """JSON that Python's decoder accepts but strict JSON does not; the message is safe."""


def _reject_constant(name: str) -> Any:
    raise _StrictJSONError(f"{name} is not valid JSON")


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e400 overflows to inf
        raise _StrictJSONError("number too large for a JSON float")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:  # json keeps the last silently; the model meant one of them
            raise _StrictJSONError(f"duplicate key {safe_snippet(key)}")
        result[key] = value
    return result


def _decode_body(body: str, max_chars: int, max_depth: int) -> Any | ToolCallError:
    """The JSON value of the call body, or why it is too large or not strict JSON.

    Size and depth are checked before decoding, so the decoder never sees a huge or deeply
    nested input; RecursionError is still caught in case a caller raises the caps."""
    if len(body) > max_chars:
        return ToolCallError(
            _Kind.TOO_LARGE, f"tool call has {len(body)} characters; the limit is {max_chars}"
        )
    body = body.strip(_JSON_WS)
    if not body:
        return ToolCallError(_Kind.MALFORMED, "tool call is empty")
    if _nesting_exceeds(body, max_depth):
        return ToolCallError(_Kind.TOO_LARGE, f"tool call is nested deeper than {max_depth} levels")
    try:
        return json.loads(
            body,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except _StrictJSONError as exc:
        return ToolCallError(_Kind.MALFORMED, f"tool call is not strict JSON: {exc}")
    except json.JSONDecodeError as exc:  # its msg never quotes the input
        return ToolCallError(
            _Kind.MALFORMED, f"tool call is not valid JSON: {exc.msg} at {exc.pos}"
        )
    except RecursionError:
        return ToolCallError(_Kind.TOO_LARGE, "tool call is nested too deeply")
    except ValueError:  # e.g. an integer literal past Python's digit limit
        return ToolCallError(_Kind.MALFORMED, "tool call is not valid JSON")


def _nesting_exceeds(body: str, max_depth: int) -> bool:
    """Whether arrays/objects nest deeper than `max_depth`, brackets in strings ignored.

    A flat scan, no recursion; unbalanced input is left for the decoder to reject."""
    depth, in_string = 0, False
    for match in _STRUCTURE.finditer(body):
        piece = match.group()
        if piece == '"':
            in_string = not in_string
        elif in_string or piece[0] == "\\":
            continue
        elif piece in "[{":
            depth += 1
            if depth > max_depth:
                return True
        else:
            depth -= 1
    return False


def _call_from_value(value: Any, tools: dict[str, ToolSchema]) -> ToolCall | ToolCallError:
    """Check the decoded envelope, the tool name and the arguments."""
    if type(value) is not dict:
        return ToolCallError(
            _Kind.MALFORMED, "tool call must be a JSON object with name and arguments"
        )
    extra = sorted(key for key in value if key not in ("name", "arguments"))
    if extra:
        return ToolCallError(
            _Kind.MALFORMED,
            f"unexpected key {safe_snippet(extra[0])} in the tool call; "
            "use only name and arguments",
        )
    for key in ("name", "arguments"):
        if key not in value:
            return ToolCallError(_Kind.MALFORMED, f"tool call is missing '{key}'")
    name = value["name"]
    if type(name) is not str:
        return ToolCallError(_Kind.MALFORMED, "tool call 'name' must be a string")
    if name not in tools:
        known = ", ".join(sorted(tools))
        return ToolCallError(
            _Kind.UNKNOWN_TOOL, f"unknown tool {safe_snippet(name)}; available: {known[:200]}"
        )
    arguments = value["arguments"]
    if type(arguments) is not dict:
        return ToolCallError(_Kind.INVALID_ARGUMENTS, "tool call 'arguments' must be a JSON object")
    problem = validate_arguments(tools[name].parameters, arguments)
    if problem:
        return ToolCallError(_Kind.INVALID_ARGUMENTS, problem)
    return ToolCall(name, arguments)
