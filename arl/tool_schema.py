"""Validate tool-call arguments against the JSON-schema subset our tools use.

The subset (anything else fails closed, with a message, rather than being ignored):
  object   `properties`, `required`; keys not in `properties` are always rejected, whatever
           `additionalProperties` says: a tool never receives an argument it did not declare
  array    `items`, `minItems`, `maxItems`
  integer  a JSON integer: never a bool, never a float such as 5.0; `minimum`, `maximum`, `enum`
  number   an integer or a finite float, never a bool; `minimum`, `maximum`, `enum`
  string   valid unicode (no lone surrogates); `minLength`, `maxLength`, `enum`
  boolean  `enum`
Annotations (`description`, `title`, `default`, `examples`) are ignored. Bounds are inclusive.
`enum` compares type-strictly, so `true` does not match `1` and `1.0` does not match `1`.

Messages are short, name the argument, and echo model text only through `safe_snippet`, so
they are safe to show the model as an observation.
"""

from __future__ import annotations

import math
from typing import Any

SNIPPET_CHARS = 40

_ANNOTATIONS = frozenset({"description", "title", "default", "examples"})
_KEYWORDS: dict[str, frozenset[str]] = {
    "object": frozenset({"type", "properties", "required", "additionalProperties"}),
    "array": frozenset({"type", "items", "minItems", "maxItems"}),
    "integer": frozenset({"type", "minimum", "maximum", "enum"}),
    "number": frozenset({"type", "minimum", "maximum", "enum"}),
    "string": frozenset({"type", "minLength", "maxLength", "enum"}),
    "boolean": frozenset({"type", "enum"}),
}
_ARTICLE = {"object": "an", "array": "an", "integer": "an"}


def safe_snippet(text: str, limit: int = SNIPPET_CHARS) -> str:
    """`text` quoted, cut to `limit` characters, with every non-printable character (control
    characters, NUL, lone surrogates, line breaks) escaped, so the result always encodes as
    UTF-8 and stays on one line."""
    short = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text[:limit])
    return f"'{short}'" + ("..." if len(text) > limit else "")


_COUNTS = ("minItems", "maxItems", "minLength", "maxLength")


def schema_problem(schema: Any, path: str = "parameters") -> str | None:
    """None if `schema` is a schema of the supported subset, well formed (so that
    `validate_arguments` never raises on it), else one short message naming where it is not.
    For schemas from elsewhere (an agent's request), checked before they are used."""
    if not isinstance(schema, dict) or schema.get("type") not in _KEYWORDS:
        return f"{path}: type must be one of {sorted(_KEYWORDS)}"
    unknown = sorted(set(schema) - _KEYWORDS[schema["type"]] - _ANNOTATIONS)
    if unknown:
        return f"{path}: unsupported keyword {safe_snippet(str(unknown[0]))}"
    for key in ("minimum", "maximum"):
        value = schema.get(key, 0)
        if type(value) not in (int, float) or (type(value) is float and not math.isfinite(value)):
            return f"{path}.{key} must be a finite number"
    for key in _COUNTS:
        if key in schema and (type(schema[key]) is not int or schema[key] < 0):
            return f"{path}.{key} must be a whole number >= 0"
    if "enum" in schema and not (isinstance(schema["enum"], list) and schema["enum"]):
        return f"{path}.enum must be a non-empty list"
    if schema["type"] == "array":
        return schema_problem(schema.get("items"), f"{path}.items")
    if schema["type"] == "object":
        properties, required = schema.get("properties", {}), schema.get("required", [])
        if not isinstance(properties, dict) or not all(isinstance(k, str) for k in properties):
            return f"{path}.properties must map names to schemas"
        if not isinstance(required, list) or not all(isinstance(k, str) for k in required):
            return f"{path}.required must be a list of names"
        for name, item in properties.items():
            problem = schema_problem(item, f"{path}.properties.{safe_snippet(name)[1:-1]}")
            if problem:
                return problem
    return None


def validate_arguments(schema_parameters: dict[str, Any], arguments: Any) -> str | None:
    """None if `arguments` satisfies `schema_parameters` (a tool's `parameters`, an object
    schema), else one short message naming the first offending argument. Never raises for
    JSON-shaped `arguments` (dict, list, str, int, float, bool, None); a malformed schema
    (a bound that is not a number, say) is a programming error and may raise."""
    return _check(schema_parameters, arguments, "")


def _where(path: str) -> str:
    return f"argument '{path}'" if path else "arguments"


def _check(schema: Any, value: Any, path: str) -> str | None:
    """Validate one value at `path` ('' for the top level, 'a.b[2]' below it)."""
    if not isinstance(schema, dict) or schema.get("type") not in _KEYWORDS:
        return f"{_where(path)}: the tool's schema is not supported"
    kind = schema["type"]
    unknown = sorted(set(schema) - _KEYWORDS[kind] - _ANNOTATIONS)
    if unknown:  # fail closed: an ignored constraint would let bad arguments through
        return f"{_where(path)}: the tool's schema uses unsupported keyword '{unknown[0]}'"
    if not _has_type(kind, value):
        return f"{_where(path)} must be {_ARTICLE.get(kind, 'a')} {kind}, got {_describe(value)}"
    if kind == "object":
        return _check_object(schema, value, path)
    if kind == "array":
        return _check_array(schema, value, path)
    return _check_scalar(schema, value, path)


def _has_type(kind: str, value: Any) -> bool:
    """JSON type test; bool is never a number, and a float is never an integer."""
    if kind == "integer":
        return type(value) is int
    if kind == "number":
        return type(value) is int or (type(value) is float and math.isfinite(value))
    if kind == "string":
        return type(value) is str
    if kind == "boolean":
        return type(value) is bool
    if kind == "object":
        return type(value) is dict
    return type(value) is list


def _check_object(schema: dict[str, Any], value: dict[Any, Any], path: str) -> str | None:
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    if not isinstance(properties, dict) or not isinstance(required, list):
        return f"{_where(path)}: the tool's schema is not supported"
    for key in value:
        if key not in properties:
            name = safe_snippet(key) if isinstance(key, str) else "a non-string key"
            return f"unexpected argument {name}" + (f" in {_where(path)}" if path else "")
    for key in required:
        if key not in value:
            return f"missing required argument '{_join(path, key)}'"
    for key, item in value.items():
        problem = _check(properties[key], item, _join(path, key))
        if problem:
            return problem
    return None


def _check_array(schema: dict[str, Any], value: list[Any], path: str) -> str | None:
    if "minItems" in schema and len(value) < schema["minItems"]:
        return f"{_where(path)} needs at least {schema['minItems']} items"
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return f"{_where(path)} allows at most {schema['maxItems']} items"
    if "items" not in schema:
        return f"{_where(path)}: the tool's schema is not supported"
    for index, item in enumerate(value):
        problem = _check(schema["items"], item, f"{path}[{index}]")
        if problem:
            return problem
    return None


def _check_scalar(schema: dict[str, Any], value: Any, path: str) -> str | None:
    if "enum" in schema and not any(
        type(value) is type(option) and value == option for option in schema["enum"]
    ):
        options = ", ".join(_describe(option) for option in schema["enum"][:10])[:120]
        return f"{_where(path)} must be one of {options}; got {_describe(value)}"
    if type(value) is str:
        return _check_string(schema, value, path)
    # int/float compare exactly in Python, so 10**400 against maximum 9 cannot overflow.
    if "minimum" in schema and value < schema["minimum"]:
        return f"{_where(path)} must be at least {schema['minimum']}, got {_describe(value)}"
    if "maximum" in schema and value > schema["maximum"]:
        return f"{_where(path)} must be at most {schema['maximum']}, got {_describe(value)}"
    return None


def _check_string(schema: dict[str, Any], value: str, path: str) -> str | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: the env could not even print it back
        return f"{_where(path)} must be valid unicode text"
    if "minLength" in schema and len(value) < schema["minLength"]:
        return f"{_where(path)} needs at least {schema['minLength']} characters"
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        return f"{_where(path)} allows at most {schema['maxLength']} characters"
    return None


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _describe(value: Any) -> str:
    """A short, safe rendering of a JSON value for messages."""
    if value is None:
        return "null"
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is int:
        # str() of a huge int is slow, and raises past 4300 digits.
        return str(value) if value.bit_length() <= 128 else "a very large integer"
    if type(value) is float:
        return repr(value)
    if type(value) is str:
        return safe_snippet(value)
    if type(value) is dict:
        return "an object"
    if type(value) is list:
        return "an array"
    return "an unsupported value"
