"""Where a run's metrics go: metrics.jsonl (flushed every step) and wandb (online, offline or
disabled; it never prompts for a key)."""

from __future__ import annotations

import json
import math
import os
from typing import Any

from arl.metrics import Metrics
from arl.types import Histogram


class JsonlLogger:
    """Appends one JSON object per step to `path` and flushes it, so a crash loses nothing."""

    def __init__(self, path: str):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())

    def log(self, step: int, metrics: Metrics) -> None:
        row = {"step": step, **{k: _jsonable(v) for k, v in sorted(metrics.items())}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _jsonable(value: float | Histogram) -> float | None | dict[str, list]:
    """A histogram as its JSON dict; a number as itself, or None (null) if not finite."""
    if isinstance(value, Histogram):
        return value.as_json()
    value = float(value)
    return value if math.isfinite(value) else None


class WandbLogger:
    """wandb in online, offline or disabled mode; it never prompts for a key. `run_id`
    continues an existing wandb run (a resumed training run) instead of starting one."""

    def __init__(self, mode: str, project: str, entity: str, name: str, run_dir: str,
                 config: dict[str, Any], run_id: str | None = None):
        import wandb  # heavy import at the edge

        if mode == "online" and not os.environ.get("WANDB_API_KEY") and not netrc_has_wandb():
            raise RuntimeError("wandb.mode=online needs WANDB_API_KEY (or `wandb login`)")
        self._run = wandb.init(
            mode=mode,
            project=project,
            entity=entity or None,
            name=name,
            id=run_id,
            resume="allow" if run_id else None,
            dir=run_dir,
            config=config,
            settings=wandb.Settings(silent=True, console="off"),
        )
        self._logged_through = -1  # wandb's steps only go forward: a replayed step is skipped

    @property
    def run_id(self) -> str:
        return str(self._run.id)

    @property
    def run_dir(self) -> str:
        return str(self._run.dir)

    def log(self, step: int, metrics: Metrics) -> None:
        import wandb

        if step <= self._logged_through:
            return
        self._logged_through = step
        self._run.log({k: wandb.Histogram(np_histogram=(list(v.counts), list(v.edges)))
                       if isinstance(v, Histogram) else v for k, v in metrics.items()},
                      step=step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        """A table of sample conversations (`samples` in wandb) at `step`."""
        import wandb

        if step <= self._logged_through:
            return
        columns = ["step", "group_id", "reward", "outcome", "conversation"]
        table = wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in rows])
        self._run.log({"samples": table}, step=step)

    def close(self) -> None:
        import wandb

        self._run.finish()
        # wandb's service process would otherwise outlive the run in a process that goes on
        # (a library caller, a benchmark looping over runs).
        wandb.teardown()


def netrc_has_wandb() -> bool:
    """Whether ~/.netrc holds a wandb key (`wandb login` writes it there)."""
    path = os.path.expanduser("~/.netrc")
    return os.path.isfile(path) and "api.wandb.ai" in open(path, encoding="utf-8").read()
