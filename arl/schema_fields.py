"""How the config schema declares a key: its default, one line of help, and the values it
allows (arl/schema.py, arl/schema_learner.py and every env's config use these)."""

from __future__ import annotations

import copy
import re
from dataclasses import field
from typing import Any


def opt(default: Any, help: str, *, choices: tuple[str, ...] | None = None,
        check: str | None = None, code: bool = False) -> Any:
    """A config field: its default, one line of help, and the values it allows (`choices`,
    or `check`: positive | non_negative | fraction | share, see `CHECKS`). `arl config show`
    prints all three; `validate` enforces them. `code`: the value names code that arl
    imports (`package.module:attr`), so a config from elsewhere (a checkpoint's) may not set
    it (`arl.config.recorded_env`)."""
    meta = {"help": help, "choices": choices, "check": check, "code": code}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def section(cls: type, help: str) -> Any:
    """A nested config section."""
    return field(default_factory=cls, metadata={"help": help})


# check name -> (test, what it allows, as `arl config show` and errors say it)
CHECKS: dict[str, tuple[Any, str]] = {
    "positive": (lambda v: v > 0, "> 0"),
    "non_negative": (lambda v: v >= 0, ">= 0"),
    "fraction": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "share": (lambda v: 0 < v <= 1, "in (0, 1]"),
    "resume": (lambda v: v in ("never", "auto") or re.fullmatch(r"step_\d+", v) is not None,
               "never, auto or step_<n>"),
    "name": (lambda v: re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.+=@-]{0,99}", v) is not None,
             "a plain name: 1-100 letters, digits and _ . + = @ -, not starting with . or -"),
}
