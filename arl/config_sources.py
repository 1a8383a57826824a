"""The sources of a config as omegaconf nodes: YAML files and `key=value` overrides, read so
that every way they can be malformed is a ConfigError naming the file or key (arl/config.py
merges and validates them)."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from arl.errors import ConfigError, one_line

_KEY = re.compile(r"[A-Za-z_]\w*(\.\w+)*")


def parse_override(item: str) -> Any:
    """One `key=value` as an omegaconf node (the value read as YAML); ConfigError naming the
    key when the value does not parse."""
    import yaml

    key = item.split("=", 1)[0]
    if not _KEY.fullmatch(key.strip()):
        raise ConfigError(key, "not a config key: dotted names such as learner.optim.lr")
    try:
        return OmegaConf.from_dotlist([item])
    except (yaml.YAMLError, OmegaConfBaseException, ValueError, TypeError, IndexError) as err:
        reason = str(getattr(err, "problem", None) or err).splitlines()[0]
        raise ConfigError(item.split("=", 1)[0], "the value does not parse as YAML "
                          f"({one_line(reason, 120)})") from None


def load_yaml(path: str) -> Any:
    """A YAML file as an omegaconf node; ConfigError with the line for malformed YAML."""
    import yaml

    if not os.path.isfile(path):
        raise ConfigError("<file>", f"config file not found: {path}")
    try:
        node = OmegaConf.load(path)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError("<file>", f"{where}: not valid YAML ({problem})") from None
    except UnicodeDecodeError:
        raise ConfigError("<file>", f"{path}: not UTF-8 text") from None
    except (OSError, OmegaConfBaseException, ValueError, TypeError) as err:
        # omegaconf's refusals: a lone number or string, keys that are not strings, ...
        reason = one_line(str(err).splitlines()[0] if str(err) else type(err).__name__, 120)
        raise ConfigError("<file>", f"{path}: must hold a mapping of keys ({reason})") from None
    if not isinstance(node, DictConfig):
        raise ConfigError("<file>", f"{path}: must hold a mapping of keys, not a list")
    return node


MISSING = object()


def select(node: Any, key: str) -> Any:
    """The value at dotted `key`, or MISSING where there is none or the key is no key."""
    try:
        return OmegaConf.select(node, key, default=MISSING)
    except (OmegaConfBaseException, IndexError, ValueError, TypeError):
        return MISSING


def first_key(node: Any) -> str:
    """The dotted path of the first leaf of `node` (what a one-key override sets)."""
    parts = []
    while isinstance(node, DictConfig) and len(node):
        name = next(iter(node))
        parts.append(str(name))
        node = node._get_node(name)
    return ".".join(parts) or "<unknown>"


def check_moved(source: str, node: Any) -> None:
    """ConfigError at the first key of `node` (a file or an override, named `source`) that
    the schema has moved (`MOVED_KEYS`), naming its new place."""
    from arl.schema_learner import LEARNER_SECTIONS, MOVED_KEYS, LearnerResources

    learner = select(node, "learner")
    if not isinstance(learner, DictConfig):
        return
    for old, new in MOVED_KEYS.items():
        value = select(node, old)
        if value is not MISSING and not isinstance(value, DictConfig):
            raise ConfigError(old, f"moved to {new} (the learner's keys are in sections: "
                              f"{', '.join(LEARNER_SECTIONS)}; from {source})")
    custom = select(node, "learner.resources")
    own = {f.name for f in dataclasses.fields(LearnerResources)}
    for name in custom if isinstance(custom, DictConfig) else ():
        if name not in own:
            raise ConfigError(f"learner.resources.{name}", "custom Ray resources moved to "
                              f"learner.resources.custom.{name} (from {source})")
