"""Errors that are the user's to fix: a bad config value, a missing file, an unusable
checkpoint or model. The `arl` command prints one line for each and exits with status 2;
any other exception is a bug and keeps its traceback."""

from __future__ import annotations

from typing import Any

LINE_CHARS = 500  # the longest error line the `arl` command prints
VALUE_CHARS = 80  # the longest echo of a value the user gave


class UserError(Exception):
    """Something the user gave arl is wrong; the message says what, and what to do."""


class ConfigError(UserError, ValueError):
    """A config value is unknown, mistyped or impossible. `key` is its dotted path (cut to
    80 characters where the user typed it)."""

    def __init__(self, key: str, message: str):
        key = one_line(key, VALUE_CHARS)
        super().__init__(f"config error at '{key}': {message}")
        self.key = key


class ModelUnavailable(UserError, FileNotFoundError):
    """`model.path` names no model this machine can load."""


class LearnerLost(RuntimeError):
    """A learner actor died (its process ended: an OOM kill, a segfault, a lost node). The
    driver rebuilds the learner group from the last checkpoint
    (`learner.checkpoint.max_restarts`)."""


class RolloutWorkerLost(RuntimeError):
    """A rollout worker died during a call. It has been rebuilt with the current weights;
    the call must be started again (same arguments: same episodes)."""


def one_line(text: str, limit: int = LINE_CHARS) -> str:
    """`text` on one line of at most `limit` characters: line breaks, NUL and every other
    non-printable character escaped, the rest cut with "..." (an error may echo input of
    any size or content)."""
    flat = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text[: limit + 1])
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def shown(value: Any, limit: int = VALUE_CHARS) -> str:
    """The repr of a value the user gave, on one line and cut to `limit` characters."""
    return one_line(repr(value), limit)
