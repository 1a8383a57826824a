"""Ctrl-C (SIGINT to the whole foreground process group, as a terminal sends it) acts like
SIGTERM: the step finishes, a checkpoint is saved, exit 130; a second Ctrl-C stops at once."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _start(tmp_path, model_dir, *overrides: str):
    return subprocess.Popen(
        [sys.executable, "-m", "arl.app.cli", "train", "configs/ci.yaml", "steps=200",
         f"output_dir={tmp_path}", f"model.path={model_dir}", *overrides],
        cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)


def _wait_for_rows(path: pathlib.Path, rows: int, proc, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not (path.is_file() and path.read_text().count("\n") >= rows):
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "the run logged no steps"
        time.sleep(0.1)


def test_ctrl_c_finishes_the_step_checkpoints_and_exits_130(tmp_path, warm_model_dir):
    proc = _start(tmp_path, warm_model_dir)
    _wait_for_rows(tmp_path / "ci" / "metrics.jsonl", 2, proc)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-3000:]
    assert "stopped by SIGINT after step" in out
    steps = (tmp_path / "ci" / "metrics.jsonl").read_text().count("\n")
    checkpoints = tmp_path / "ci" / "checkpoints"
    assert (checkpoints / f"step_{steps:06d}" / "manifest.json").is_file()
    assert (checkpoints / "latest").read_text().strip() == f"step_{steps:06d}"


def test_a_second_ctrl_c_stops_at_once(tmp_path, warm_model_dir):
    # Steps long enough (64 episodes of up to 256 tokens) that the second Ctrl-C lands inside
    # the step the first one lets finish.
    proc = _start(tmp_path, warm_model_dir, "rollout.groups_per_step=16",
                  "rollout.max_new_tokens=256", "rollout.temperature=3.0")
    _wait_for_rows(tmp_path / "ci" / "metrics.jsonl", 1, proc)
    os.killpg(proc.pid, signal.SIGINT)
    seen = []  # two signals sent before Python ran its handler would count once: wait for it
    for line in proc.stdout:
        seen.append(line)
        if "Ctrl-C again" in line:
            break
    os.killpg(proc.pid, signal.SIGINT)
    out = "".join(seen) + proc.communicate(timeout=300)[0]
    assert proc.returncode == 130, out[-3000:]
    assert "interrupted" in out and "Traceback" not in out
    assert "stopped by SIGINT" not in out  # no checkpoint: it did not wait for the step


def test_ctrl_c_while_the_workers_start_stops_before_the_first_step(tmp_path, warm_model_dir):
    proc = _start(tmp_path, warm_model_dir)
    config = tmp_path / "ci" / "config.json"  # written just before the signal handlers
    deadline = time.monotonic() + 120
    while not config.is_file():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    time.sleep(0.5)  # Ray and the workers take seconds to start
    proc.send_signal(signal.SIGINT)  # the driver alone, while it starts its workers
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, out[-3000:]
    assert "stopped by SIGINT before step 1" in out and "Traceback" not in out
    checkpoints = tmp_path / "ci" / "checkpoints"
    assert (checkpoints / "latest").read_text().strip() == "step_000000"
