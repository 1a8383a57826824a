"""Checks of values that come from outside a config's own schema: numbers that must be
finite, strings that must be plain, addresses that must stay on loopback, and an env section
that a file from elsewhere (a checkpoint) records, which must not name code.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import math
import re
from typing import Any

from arl.env_spec import registered_names, resolve_env
from arl.errors import ConfigError, UserError, shown

log = logging.getLogger(__name__)

_CODE_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def recorded_env(values: Any, source: str) -> dict[str, Any]:
    """The env section that a config from elsewhere records (a checkpoint's learner.json:
    its author's claim, not the user's), as values `load_config(recorded=...)` can merge:
    those of keys its env's config type has. Nothing in it may name code: its `env.name`
    must be an installed env (never `package.module:attr`), and no key may name code to
    import (`opt(code=True)`, or any text shaped `package.module:attr`). UserError, one line
    naming `source` and the key, otherwise: the user passes the env explicitly instead."""
    if not isinstance(values, dict):
        return {}
    name = values.get("name") or "default"
    refuse = (f"{source} names code to import (env.{{}}={{}}): arl never imports code a "
              "checkpoint names; choose the env yourself (arl eval --env NAME)")
    if not isinstance(name, str) or _CODE_REF.fullmatch(name) or ":" in name:
        raise UserError(refuse.format("name", shown(name)))
    if name not in registered_names():
        raise UserError(f"{source} was trained on env {shown(name)}, which is not installed "
                        "here; choose the env yourself (arl eval --env NAME)")
    spec = resolve_env(name)
    fields = {f.name: f for f in dataclasses.fields(spec.config)}
    kept = {k: v for k, v in values.items() if k in fields}
    for key, value in kept.items():
        if key != "name" and (fields[key].metadata.get("code") and value
                              or _names_code(value)):
            raise UserError(refuse.format(key, shown(value)))
    return kept


def _names_code(value: Any) -> bool:
    """Whether `value` (JSON) holds a string shaped `package.module:attr`."""
    if isinstance(value, str):
        return _CODE_REF.fullmatch(value) is not None
    if isinstance(value, dict):
        return any(_names_code(v) for v in value.values())
    if isinstance(value, list):
        return any(_names_code(v) for v in value)
    return False


def check_plain(key: str, value: Any) -> None:
    """ConfigError unless every number in `value` is finite and every string free of NUL
    bytes (inf passes `> 0`, and a NUL byte fails every file call far from its key)."""
    items = value.items() if isinstance(value, dict) else (
        enumerate(value) if isinstance(value, list) else None)
    if items is not None:
        for name, item in items:
            check_plain(f"{key}.{name}", item)
    elif isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(key, f"must be a finite number, got {value!r}")
    elif isinstance(value, str) and "\x00" in value:
        raise ConfigError(key, "holds a NUL byte")


LOOPBACK_NAMES = ("localhost",)


def is_loopback(host: str) -> bool:
    """Whether `host` is this machine's loopback address (127.0.0.0/8, ::1, localhost)."""
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_hosts(cfg: Any) -> None:
    """The addresses arl binds to (of a Config) stay on loopback unless `ray.allow_remote`
    says otherwise; then each one that does not logs a warning."""
    for key, host in (("ray.host", cfg.ray.host),
                      ("rollout.endpoint_host", cfg.rollout.endpoint_host)):
        if is_loopback(host):
            continue
        if not cfg.ray.allow_remote:
            raise ConfigError(key, f"{shown(host)} is not a loopback address: other machines "
                              "could reach what listens there; set ray.allow_remote=true "
                              "to mean it")
        log.warning("%s=%s: listening where other machines can reach it (ray.allow_remote)",
                    key, host)


