"""A run's directory and its outputs: config record, metrics.jsonl, wandb, progress, plot.

Layout of `runs/<run_name>/`: config.json, metrics.jsonl (one JSON object per step),
samples.jsonl (sample conversations every `wandb.samples_every` steps), curves.png,
report.html (the curves and sample games, arl/app/report.py),
checkpoints/step_<n>/ and checkpoints/latest, wandb/. A previous run of the same name is moved aside
to `<run_name>.prev-<k>`, never overwritten, unless the run resumes it (`resume=auto` and a
checkpoint exists): then metrics.jsonl keeps its rows before the checkpoint's step and goes on.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Any

from arl.app.jsonl import json_rows
from arl.app.plot import plot_run
from arl.app.report import write_report
from arl.app.sinks import JsonlLogger, WandbLogger
from arl.config import Config, to_dict
from arl.errors import one_line
from arl.files import mark, require_ours, write_atomic
from arl.metrics import Metrics
from arl.model.checkpoint.runs import (
    latest_checkpoint,
    named_checkpoint,
    newest_up_to,
    prune,
    remove_partial,
    require_intact,
    set_aside_after,
    step_in_name,
)
from arl.model_source import arl_home
from arl.types import EpisodeSummary

log = logging.getLogger(__name__)
# Set by Ray in the environment of a job's driver (`ray job submit`).
RAY_JOB_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def output_root(output_dir: str) -> str:
    """Where runs go. A relative `output_dir` is relative to the working directory, except in
    a Ray job: there the working directory is Ray's temporary copy of the uploaded one, so it
    resolves under $ARL_HOME/runs (ARL_HOME as the node's `ray start` saw it)."""
    if os.path.isabs(output_dir) or RAY_JOB_ENV not in os.environ:
        return output_dir
    return os.path.join(arl_home(), output_dir)


def run_dir(cfg: Config) -> str:
    """The absolute path of the run's directory."""
    return os.path.abspath(os.path.join(output_root(cfg.output_dir), cfg.run_name))


REPORT_EVERY = 10  # steps between rewrites of report.html while the run goes
PROGRESS_KEYS = (("rollout/reward_mean", "reward"), ("rollout/invalid_tool_call_rate", "invalid"))


class Run:
    """Context manager owning one run directory and every metrics sink."""

    def __init__(self, cfg: Config, progress: bool = True):
        self.cfg = cfg
        self.dir = run_dir(cfg)
        self.progress = progress
        self._sinks: list[Any] = []
        self._bar: Any = None
        self._wandb: WandbLogger | None = None
        # The checkpoint to continue from (None: a new run), and the step it ends.
        self.resume_from: str | None = None
        self.start_step = 0
        self.next_step = 0  # the step after the last one logged
        folder = os.path.join(self.dir, "checkpoints")
        if cfg.resume == "auto":
            self.resume_from = latest_checkpoint(folder)
        elif cfg.resume != "never":
            self.resume_from = named_checkpoint(folder, cfg.resume)
        if self.resume_from is not None:
            require_intact(self.resume_from)

    def __enter__(self) -> Run:
        if self.resume_from is None:
            check_run_dir(self.cfg)
            _move_aside(self.dir)
            os.makedirs(os.path.join(self.dir, "checkpoints"))
            mark(self.dir, "run")
        else:
            self.start_step = self.next_step = step_in_name(self.resume_from)
            set_aside_after(os.path.join(self.dir, "checkpoints"), self.start_step)
            _keep_rows_before(self.metrics_path, self.start_step)
            _keep_rows_before(self.samples_path, self.start_step)
            remove_partial(os.path.join(self.dir, "checkpoints"))
        write_atomic(os.path.join(self.dir, "config.json"), json.dumps(to_dict(self.cfg),
                                                                      indent=2))
        return self

    def open_sinks(self, wandb_run_id: str | None = None) -> None:
        """Start metrics.jsonl, wandb and the progress bar. A resumed run passes the wandb
        run id its checkpoint recorded, so wandb continues that run instead of a new one."""
        self._sinks.append(JsonlLogger(self.metrics_path))
        if self.cfg.wandb.mode != "disabled":
            wb = self.cfg.wandb
            self._wandb = WandbLogger(wb.mode, wb.project, wb.entity, self.cfg.run_name,
                                      self.dir, to_dict(self.cfg), run_id=wandb_run_id)
            self._sinks.append(self._wandb)
        if self.progress:
            from tqdm import tqdm

            self._bar = tqdm(total=self.cfg.steps, initial=self.start_step,
                             desc=self.cfg.run_name, unit="step")

    @property
    def wandb_run_id(self) -> str | None:
        """The wandb run's id (None when wandb is disabled); checkpoints record it."""
        return self._wandb.run_id if self._wandb is not None else None

    @property
    def metrics_path(self) -> str:
        return os.path.join(self.dir, "metrics.jsonl")

    @property
    def samples_path(self) -> str:
        return os.path.join(self.dir, "samples.jsonl")

    def checkpoint_dir(self, step: int) -> str:
        return os.path.join(self.dir, "checkpoints", f"step_{step:06d}")

    def has_checkpoint(self, step: int) -> bool:
        return os.path.isdir(self.checkpoint_dir(step))

    def prune_checkpoints(self, keep: int) -> list[str]:
        """Delete all but the newest `keep` checkpoints (0: keep all); the one `latest`
        names is always kept. Returns the deleted folders."""
        return prune(os.path.join(self.dir, "checkpoints"), keep)

    def last_checkpoint(self) -> str | None:
        """The newest checkpoint of this run no later than the steps logged so far (one
        written just before a crash, with its step's metrics not yet logged, is not it)."""
        return newest_up_to(os.path.join(self.dir, "checkpoints"), self.next_step)

    def rewind(self, step: int) -> None:
        """Go back to just after `step` steps, to play the later ones again: metrics.jsonl
        and samples.jsonl keep only the rows of earlier steps, the progress bar goes back,
        partial checkpoints are deleted and later ones (one written just before a crash,
        ahead of its step's metrics) set aside. wandb's steps only go forward: it keeps its
        first record of a replayed step."""
        self.next_step = step
        for sink in self._sinks:
            if isinstance(sink, JsonlLogger):
                sink.close()
        _keep_rows_before(self.metrics_path, step)
        _keep_rows_before(self.samples_path, step)
        self._sinks = [JsonlLogger(self.metrics_path) if isinstance(sink, JsonlLogger)
                       else sink for sink in self._sinks]
        folder = os.path.join(self.dir, "checkpoints")
        remove_partial(folder)
        set_aside_after(folder, step)
        if self._bar is not None:
            self._bar.reset(total=self.cfg.steps)
            self._bar.update(step)

    def log_samples(self, step: int, summaries: Sequence[EpisodeSummary]) -> None:
        """The episodes that carry a transcript, to samples.jsonl and the wandb table."""
        rows = [{"step": step, "group_id": s.group_id, "reward": s.reward,
                 "outcome": s.outcome.kind if s.outcome is not None else "",
                 "conversation": s.transcript,
                 "messages": [m.as_dict() for m in s.messages]}
                for s in summaries if s.transcript is not None]
        if not rows:
            return
        with open(self.samples_path, "a", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        if self._wandb is not None:
            self._wandb.log_samples(step, rows)

    def log(self, step: int, metrics: Metrics) -> None:
        self.next_step = step + 1
        for sink in self._sinks:
            sink.log(step, metrics)
        if (step + 1) % REPORT_EVERY == 0:
            _outputs(write_report, self.dir, live=True)
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
        if os.path.exists(self.metrics_path) and os.path.getsize(self.metrics_path):
            _outputs(plot_run, self.dir)
            _outputs(write_report, self.dir, live=False)


def _outputs(write: Any, *args: Any, **kwargs: Any) -> None:
    """Redraw a view of the run (curves.png, report.html). A view that fails to draw (a full
    disk, a broken font, a bug) is logged and the run goes on: the metrics, samples and
    checkpoints are what count, and `arl plot` redraws the views from them."""
    try:
        write(*args, **kwargs)
    except Exception as err:  # any failure of a view; the run's data is already written
        log.warning("could not write %s's output (%s: %s); the run goes on, `arl plot` "
                    "redraws it", getattr(write, "__name__", "a view"), type(err).__name__,
                    one_line(str(err), 200))


def check_run_dir(cfg: Config) -> None:
    """NotOurs (one line) when the run directory exists, is not a run directory arl made,
    and this run would move it aside: a run_name or output_dir that names someone's own
    folder never moves it."""
    if cfg.resume == "never" or latest_checkpoint(os.path.join(run_dir(cfg),
                                                               "checkpoints")) is None:
        require_ours(run_dir(cfg), "run", "output_dir/run_name")


def _move_aside(path: str) -> None:
    if not os.path.exists(path):
        return
    k = 1
    while os.path.exists(f"{path}.prev-{k}"):
        k += 1
    os.rename(path, f"{path}.prev-{k}")


def _keep_rows_before(path: str, step: int) -> None:
    """Rewrite metrics.jsonl (atomically) with only the rows of steps before `step`: the
    steps after the checkpoint are played again."""
    rows = [line if line.endswith("\n") else line + "\n" for line, row in json_rows(path)
            if isinstance(row.get("step"), int) and row["step"] < step]
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(rows)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
