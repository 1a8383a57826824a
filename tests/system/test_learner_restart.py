"""In-run learner recovery: SIGKILL the learner actor's process of a running `arl train`
(as an OOM kill or a segfault would end it); the driver rebuilds the learner from the last
checkpoint, plays the lost steps again and ends with the uninterrupted run's metrics."""

from __future__ import annotations

import json
import math
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from tests.builders import metrics_rows

psutil = pytest.importorskip("psutil")

ROOT = pathlib.Path(__file__).resolve().parents[2]
ARL = pathlib.Path(sys.executable).parent / "arl"
STEPS = 12
RESTARTS = "learner/restarts"


def _command(model_dir, out_dir, *extra):
    return [str(ARL), "train", "configs/ci.yaml", f"model.path={model_dir}",
            f"output_dir={out_dir}", f"steps={STEPS}", "learner.checkpoint_every=4",
            "ray.address=local", *extra]


def _env():
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


def _rows(out_dir) -> list[dict]:
    return metrics_rows(pathlib.Path(out_dir) / "ci")


def _logged(out_dir) -> list[dict]:
    path = pathlib.Path(out_dir) / "ci" / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.endswith("}")]


def _kill_learner(proc: subprocess.Popen, last: bool = False) -> None:
    """SIGKILL a learner actor's process among the run's descendants (the first one
    started, or with `last` the last one: with two ranks, rank 1)."""
    found = []
    for child in psutil.Process(proc.pid).children(recursive=True):
        try:
            if child.cmdline() and child.cmdline()[0].startswith("ray::LearnerWorker"):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    assert found, "no learner actor process found"
    victim = max(found, key=lambda p: p.create_time()) if last else min(
        found, key=lambda p: p.create_time())
    victim.send_signal(signal.SIGKILL)


def _wait_until(proc: subprocess.Popen, ready, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if ready():
            return
        time.sleep(0.05)
    raise AssertionError("the run ended (or stalled) before the condition held")


def _kill_after(proc, out_dir, restarts: int, steps: int, last: bool = False) -> None:
    """Wait for `steps` rows logged since the learner was rebuilt `restarts` times; kill it."""
    _wait_until(proc, lambda: sum(r.get(RESTARTS) == restarts for r in _logged(out_dir))
                >= steps)
    _kill_learner(proc, last)


def _without_restarts(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != RESTARTS} for r in rows]


@pytest.mark.slow
def test_two_learner_kills_in_a_sync_run_give_the_uninterrupted_metrics(tmp_path,
                                                                       warm_model_dir):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    done = subprocess.run(_command(warm_model_dir, whole), cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    proc = subprocess.Popen(_command(warm_model_dir, broken), cwd=ROOT, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _kill_after(proc, broken, restarts=0, steps=6)  # between checkpoints 4 and 8
        _kill_after(proc, broken, restarts=1, steps=4)  # after the replay from step 4
        _, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    assert stderr.count("rebuilding the learner from") == 2, stderr[-3000:]
    rows = _rows(broken)
    assert [r["step"] for r in rows] == list(range(STEPS))
    assert rows[-1][RESTARTS] == 2
    assert _without_restarts(rows) == _without_restarts(_rows(whole))


@pytest.mark.slow
def test_a_learner_death_past_max_restarts_stops_with_a_resumable_checkpoint(
        tmp_path, warm_model_dir):
    proc = subprocess.Popen(_command(warm_model_dir, tmp_path, "learner.max_restarts=0"),
                            cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        _kill_after(proc, tmp_path, restarts=0, steps=5)
        _, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 3, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert "learner.max_restarts=0" in last and "resume=auto continues from" in last, last
    resumed = subprocess.run(_command(warm_model_dir, tmp_path, "resume=auto"), cwd=ROOT,
                             env=_env(), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in _rows(tmp_path)] == list(range(STEPS))


@pytest.mark.slow
def test_one_rank_of_a_zero2_group_killed_the_group_is_rebuilt_and_the_run_completes(
        tmp_path, warm_model_dir):
    pytest.importorskip("deepspeed")
    command = _command(warm_model_dir, tmp_path, "steps=8", "learner.num_workers=2",
                       "learner.backend=deepspeed", "learner.zero_stage=2", "ray.num_cpus=3",
                       "learner.collective_timeout_s=60")
    proc = subprocess.Popen(command, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        _kill_after(proc, tmp_path, restarts=0, steps=5, last=True)  # rank 1; 0 survives
        _, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    rows = _rows(tmp_path)
    assert [r["step"] for r in rows] == list(range(8))
    assert rows[-1][RESTARTS] == 1
    assert all(math.isfinite(r["learner/grad_norm"]) for r in rows)


@pytest.mark.slow
def test_async_run_survives_a_learner_kill_within_its_staleness_bound(tmp_path,
                                                                      warm_model_dir):
    command = _command(warm_model_dir, tmp_path, "mode=async", "max_staleness=1",
                       "rollout.num_workers=2", "ray.num_cpus=3")
    proc = subprocess.Popen(command, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        _kill_after(proc, tmp_path, restarts=0, steps=6)
        _, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-3000:]
    rows = _rows(tmp_path)
    assert [r["step"] for r in rows] == list(range(STEPS))
    assert rows[-1][RESTARTS] == 1
    # What was generated before the death never reaches the restored learner: every batch
    # after it is within the bound of the restored versions, and nothing is trained twice.
    assert all(0 <= r["async/staleness_mean"] and r["async/staleness_max"] <= 1 for r in rows)
    assert all(r["learner/duplicate_trajectories"] == 0 for r in rows)
