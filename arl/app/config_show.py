"""`arl config show [CONFIG ...] [key=value ...]`: the resolved config as YAML, every key with
its help, its default and the values it allows; the env section as its env's config type has
it, with the names of the installed envs."""

from __future__ import annotations

import dataclasses
from typing import Any

import yaml

from arl.config import CHECKS, Config, field_info
from arl.env_spec import registered_names


def show(cfg: Config) -> str:
    """The YAML text: loadable by `arl train` as it is (comments carry the help)."""
    lines: list[str] = []
    _section(cfg, "", 0, lines, type(cfg.env))
    return "\n".join(lines) + "\n"


def _section(obj: Any, prefix: str, depth: int, lines: list[str], env: type) -> None:
    pad = "  " * depth
    for f in dataclasses.fields(obj):
        key = f"{prefix}{f.name}"
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(value):
            lines.append(f"{pad}# {f.metadata['help']}")
            lines.append(f"{pad}{f.name}:")
            _section(value, f"{key}.", depth + 1, lines, env)
            continue
        lines.append(f"{pad}# {describe(key, env)}")
        if key == "env.name":
            lines.append(f"{pad}# installed envs: {', '.join(registered_names())}")
        lines.append(f"{pad}{f.name}: {_scalar(value)}")


def describe(key: str, env: type) -> str:
    """`help. default D; allowed` for one dotted key (env keys of config type `env`)."""
    found, default = field_info(key, env)
    meta = found.metadata
    allowed = ""
    if meta["choices"]:
        allowed = "; one of " + " | ".join(meta["choices"])
    elif meta["check"]:
        allowed = f"; {CHECKS[meta['check']][1]}"
    return f"{meta['help']}. default {_scalar(default)}{allowed}"


def _scalar(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()

