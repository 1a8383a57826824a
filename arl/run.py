"""A run's directory and its outputs: config record, metrics.jsonl, wandb, progress, plot.

Layout of `runs/<run_name>/`: config.json, metrics.jsonl (one JSON object per step),
curves.png, checkpoints/step_<n>/, wandb/. A previous run of the same name is moved aside
to `<run_name>.prev-<k>`, never overwritten.
"""

from __future__ import annotations

import json
import os
from typing import Any

from arl.config import Config, to_dict
from arl.metrics import JsonlLogger, WandbLogger

PROGRESS_KEYS = (("rollout/reward_mean", "reward"), ("rollout/invalid_tool_call_rate", "invalid"))


class Run:
    """Context manager owning one run directory and every metrics sink."""

    def __init__(self, cfg: Config, progress: bool = True):
        self.cfg = cfg
        self.dir = os.path.join(cfg.output_dir, cfg.run_name)
        self.progress = progress
        self._sinks: list[Any] = []
        self._bar: Any = None

    def __enter__(self) -> Run:
        _move_aside(self.dir)
        os.makedirs(os.path.join(self.dir, "checkpoints"))
        with open(os.path.join(self.dir, "config.json"), "w", encoding="utf-8") as f:
            json.dump(to_dict(self.cfg), f, indent=2)
        self._sinks.append(JsonlLogger(self.metrics_path))
        if self.cfg.wandb.mode != "disabled":
            wb = self.cfg.wandb
            self._sinks.append(
                WandbLogger(wb.mode, wb.project, wb.entity, self.cfg.run_name, self.dir,
                            to_dict(self.cfg))
            )
        if self.progress:
            from tqdm import tqdm

            self._bar = tqdm(total=self.cfg.steps, desc=self.cfg.run_name, unit="step")
        return self

    @property
    def metrics_path(self) -> str:
        return os.path.join(self.dir, "metrics.jsonl")

    def checkpoint_dir(self, step: int) -> str:
        return os.path.join(self.dir, "checkpoints", f"step_{step:06d}")

    def has_checkpoint(self, step: int) -> bool:
        return os.path.isdir(self.checkpoint_dir(step))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        for sink in self._sinks:
            sink.log(step, metrics)
        if self._bar is not None:
            shown = {label: f"{metrics[key]:.3f}" for key, label in PROGRESS_KEYS if key in metrics}
            shown["s/step"] = f"{metrics['timing/step']:.2f}"
            self._bar.set_postfix(shown, refresh=False)
            self._bar.update(1)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
        for sink in self._sinks:
            sink.close()
        if os.path.getsize(self.metrics_path):
            from arl.plot import plot_run

            plot_run(self.dir)


def _move_aside(path: str) -> None:
    if not os.path.exists(path):
        return
    k = 1
    while os.path.exists(f"{path}.prev-{k}"):
        k += 1
    os.rename(path, f"{path}.prev-{k}")
