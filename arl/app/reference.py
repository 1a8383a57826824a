"""The documentation's generated pages: the configuration reference (from the schema) and the
metrics glossary (from `arl.metric_names`). `python -m arl.app.reference docs/reference`
writes them; a test fails when the committed pages differ from what this module generates."""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from arl.config import CHECKS, EnvConfig, field_info, keys
from arl.env_spec import registered_names, resolve_env
from arl.metric_names import GLOSSARY


def _cell(text: str) -> str:
    """`text` in a Markdown table cell: pipes escaped, angle brackets shown, one line."""
    return (text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\n", " "))


def _row(key: str, env: type) -> str:
    found, default = field_info(key, env)
    meta = found.metadata
    allowed = (", ".join(meta["choices"]) if meta["choices"]
               else CHECKS[meta["check"]][1] if meta["check"] else "")
    shown = default if isinstance(default, str) else json.dumps(default)
    return (f"| `{key}` | {_code(shown) if shown else '(empty)'} | {_cell(allowed)} | "
            f"{_cell(meta['help'])} |")


def _code(text: str) -> str:
    """`text` as inline code in a table cell (a pipe inside is escaped)."""
    return "`" + text.replace("|", "\\|") + "`"


def _table(rows: list[str]) -> list[str]:
    return ["| key | default | allowed | what it does |", "|---|---|---|---|", *rows, ""]


def config_reference() -> str:
    """Every key of the schema, by section, then each installed env's own `env.*` keys."""
    out = ["# Configuration reference", "",
           "Generated from the schema (`python -m arl.app.reference docs/reference`); "
           "`arl config show CONFIG` prints the same help beside a config's values.", ""]
    sections: dict[str, list[str]] = {}
    for key in keys(env=EnvConfig):
        section = key.rsplit(".", 1)[0] if "." in key else "top level"
        sections.setdefault(section, []).append(_row(key, EnvConfig))
    for section, rows in sections.items():
        out += [f"## {section}" if section == "top level" else f"## `{section}`", "",
                *_table(rows)]
    base = {f.name for f in dataclasses.fields(EnvConfig)}
    out += ["## Env keys", "", "`env.name` picks the env; these are the keys each installed "
            "env adds to `env.*`.", ""]
    for name in registered_names():
        config = resolve_env(name).config
        own = [k for k in keys(env=config) if k.startswith("env.")
               and k.split(".", 1)[1].split(".")[0] not in base]
        out += [f"### `{name}` ({config.__name__})", ""]
        out += _table([_row(k, config) for k in own]) if own else ["No keys of its own.", ""]
    return "\n".join(out).rstrip() + "\n"


def metrics_reference() -> str:
    """Every metric key a run may write, by namespace, with its meaning."""
    out = ["# Metrics glossary", "",
           "Generated from `arl/metric_names.py` (`python -m arl.app.reference "
           "docs/reference`). `metrics.jsonl` and wandb get the same keys each step; "
           "`<name>` stands for a part that varies (an outcome kind, an opponent).", ""]
    groups: dict[str, list[str]] = {}
    for key, meaning in GLOSSARY.items():
        groups.setdefault(key.split("/", 1)[0], []).append(f"| `{key}` | {_cell(meaning)} |")
    for group, rows in groups.items():
        out += [f"## {group}/", "", "| key | meaning |", "|---|---|", *rows, ""]
    return "\n".join(out).rstrip() + "\n"


def generated() -> dict[str, str]:
    """Page name -> its text."""
    return {"config.md": config_reference(), "metrics.md": metrics_reference()}


def main(folder: str) -> None:
    os.makedirs(folder, exist_ok=True)
    for name, text in generated().items():
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            f.write(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/reference")
