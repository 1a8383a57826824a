"""A run's directory and its outputs: config record, metrics.jsonl, wandb, progress, plot.

Layout of `runs/<run_name>/`: config.json, metrics.jsonl (one JSON object per step),
samples.jsonl (sample conversations every `wandb.samples_every` steps), curves.png,
report.html (the curves and sample games, app/report.py),
checkpoints/step_<n>/ and checkpoints/latest, wandb/. A previous run of the same name is moved aside
to `<run_name>.prev-<k>`, never overwritten, unless the run resumes it (`resume=auto` and a
checkpoint exists): then metrics.jsonl keeps its rows before the checkpoint's step and goes on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
from collections.abc import Sequence
from typing import Any

from arl.app.plot import plot_run
from arl.app.report import write_report
from arl.app.sinks import JsonlLogger, WandbLogger
from arl.config import Config, to_dict
from arl.errors import UserError, one_line
from arl.folders import mark, require_ours
from arl.learner.checkpoint import MANIFEST_FILE, CheckpointError, verify_checkpoint
from arl.metrics import Metrics
from arl.model_path import CACHE_PREFIX, arl_home, local_path
from arl.pointer import LATEST_FILE, read_latest
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
            self.resume_from = _named_checkpoint(folder, cfg.resume)
        if self.resume_from is not None:
            _require_intact(self.resume_from)

    def __enter__(self) -> Run:
        if self.resume_from is None:
            check_run_dir(self.cfg)
            _move_aside(self.dir)
            os.makedirs(os.path.join(self.dir, "checkpoints"))
            mark(self.dir, "run")
        else:
            self.start_step = self.next_step = checkpoint_step(self.resume_from)
            _set_aside_after(os.path.join(self.dir, "checkpoints"), self.start_step)
            _keep_rows_before(self.metrics_path, self.start_step)
            _keep_rows_before(self.samples_path, self.start_step)
            _remove_partial_checkpoints(os.path.join(self.dir, "checkpoints"))
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
        folder = os.path.join(self.dir, "checkpoints")
        steps = sorted(_step_folders(folder),
                       key=lambda n: checkpoint_step(n))
        pointed = read_latest(folder)
        doomed = [n for n in steps[:-keep]] if keep else []
        removed = []
        for name in doomed:
            if pointed is not None and pointed.name == name:
                continue
            shutil.rmtree(os.path.join(folder, name))
            removed.append(os.path.join(folder, name))
        return removed

    def last_checkpoint(self) -> str | None:
        """The newest checkpoint of this run no later than the steps logged so far (one
        written just before a crash, with its step's metrics not yet logged, is not it)."""
        folder = os.path.join(self.dir, "checkpoints")
        steps = [n for n in _step_folders(folder) if checkpoint_step(n) <= self.next_step]
        return os.path.join(folder, max(steps, key=checkpoint_step)) if steps else None

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
        _remove_partial_checkpoints(folder)
        _set_aside_after(folder, step)
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


def write_atomic(path: str, text: str) -> None:
    """Write `text` to `path` by a rename, so a reader (or a crash) never meets half of it."""
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _move_aside(path: str) -> None:
    if not os.path.exists(path):
        return
    k = 1
    while os.path.exists(f"{path}.prev-{k}"):
        k += 1
    os.rename(path, f"{path}.prev-{k}")


_STEP_DIR = re.compile(r"step_(\d+)")


def checkpoint_step(path: str) -> int:
    """The step of a checkpoint folder `.../step_<n>`."""
    return int(_STEP_DIR.fullmatch(os.path.basename(os.path.normpath(path))).group(1))


def latest_checkpoint(directory: str) -> str | None:
    """The checkpoint to resume from in `directory`, or None if there is none.

    The `latest` pointer names it; a step_<n> folder newer than the pointer also counts
    (a crash can fall between a checkpoint's rename and the pointer's update). Checkpoints
    appear by an atomic rename once complete, so every step_<n> folder was complete when
    written; `load_checkpoint` still verifies its hashes before anything is loaded."""
    if not os.path.isdir(directory):
        return None
    steps = [os.path.join(directory, n) for n in _step_folders(directory)]
    pointed = read_latest(directory)
    if pointed is not None and _STEP_DIR.fullmatch(pointed.name):
        steps.append(str(pointed))
    return max(steps, key=checkpoint_step) if steps else None


def resolve_checkpoint(path: str) -> str:
    """The checkpoint (or model folder) `path` names: a checkpoint folder, a model folder,
    a run directory or its `checkpoints/` (their newest checkpoint), a `latest` pointer
    file, or a model arl built (`cache:<name>`, e.g. cache:tiny-warmstart). Raises UserError
    saying what was found instead."""
    if path.startswith(CACHE_PREFIX):
        try:
            path = local_path(path)
        except ValueError as err:
            raise UserError(str(err)) from None
    if os.path.isfile(path) and os.path.basename(path) == LATEST_FILE:
        pointed = read_latest(os.path.dirname(path) or ".")
        if pointed is None:
            raise UserError(f"{path} names no checkpoint next to it")
        return str(pointed)
    if not os.path.isdir(path):
        raise UserError(f"no checkpoint, run directory or model folder at {path}")
    found = checkpoint_under(path)
    if found is not None:
        return found
    # A run directory has a config.json too (the run's); a model folder has weights.
    if os.path.isfile(os.path.join(path, "config.json")) and any(
            name.endswith((".safetensors", ".bin", ".gguf")) for name in os.listdir(path)):
        return path
    raise UserError(f"{path} holds no checkpoint (a run writes them to "
                    "runs/<name>/checkpoints/step_<n>) and no model (config.json)")


def checkpoint_under(folder: str) -> str | None:
    """The checkpoint `folder` is, else the newest in its `checkpoints/` or in it (a run
    directory, or a run's checkpoints/); None if there is none."""
    if os.path.isfile(os.path.join(folder, MANIFEST_FILE)):
        return folder
    for candidate in (os.path.join(folder, "checkpoints"), folder):
        found = latest_checkpoint(candidate)
        if found is not None:
            return found
    return None


def _named_checkpoint(folder: str, name: str) -> str:
    """checkpoints/step_<n> for `resume=step_<n>` (any zero padding); UserError if absent."""
    step = int(name[len("step_"):])
    found = {checkpoint_step(n): n for n in _step_folders(folder)}
    if step not in found:
        have = ", ".join(found[k] for k in sorted(found)) or "none"
        raise UserError(f"resume={name}: no checkpoint step_{step:06d} in {folder} "
                        f"(there: {have})")
    return os.path.join(folder, found[step])


def _step_folders(folder: str) -> list[str]:
    """The names of the step_<n> folders in `folder` (none if it does not exist)."""
    if not os.path.isdir(folder):
        return []
    return [n for n in os.listdir(folder) if _STEP_DIR.fullmatch(n)]


def _require_intact(path: str) -> None:
    """Verify the checkpoint to resume from before anything starts. A bad one raises
    CheckpointError: one line naming the bad file and the newest intact checkpoint."""
    try:
        verify_checkpoint(path)
        return
    except CheckpointError as err:
        bad = str(err)
    folder = os.path.dirname(path)
    older = sorted((n for n in _step_folders(folder) if checkpoint_step(n) < checkpoint_step(
        path)), key=checkpoint_step, reverse=True)
    for name in older:
        try:
            verify_checkpoint(os.path.join(folder, name))
        except CheckpointError:
            continue
        raise CheckpointError(f"{bad}; the newest intact checkpoint is "
                              f"{os.path.join(folder, name)} (resume={name} continues from it)")
    raise CheckpointError(f"{bad}; no older checkpoint is intact (resume=never starts over)")


def _set_aside_after(folder: str, step: int) -> None:
    """Rename the checkpoints later than `step` to step_<n>.aside[-k] (kept, never read
    again), so that the resumed run writes its own."""
    for name in _step_folders(folder):
        if checkpoint_step(name) > step:
            target, k = os.path.join(folder, f"{name}.aside"), 1
            while os.path.exists(target):
                k += 1
                target = os.path.join(folder, f"{name}.aside-{k}")
            os.rename(os.path.join(folder, name), target)
            log.warning("resuming from step %d: %s set aside as %s", step, name, target)


def _remove_partial_checkpoints(directory: str) -> None:
    """Delete the temp folders (and pointer files) of checkpoint writes a crash cut short."""
    for name in os.listdir(directory):
        if name.startswith(".latest.tmp-"):
            os.remove(os.path.join(directory, name))
        elif name.startswith(".step_") and ".tmp-" in name:
            shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def _keep_rows_before(path: str, step: int) -> None:
    """Rewrite metrics.jsonl (atomically) with only the rows of steps before `step`: the
    steps after the checkpoint are played again."""
    rows = []
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except (json.JSONDecodeError, RecursionError):  # a line cut by the crash
                    continue
                if isinstance(row, dict) and isinstance(row.get("step"), int) and \
                        row["step"] < step:
                    rows.append(line if line.endswith("\n") else line + "\n")
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(rows)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
