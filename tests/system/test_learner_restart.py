"""In-run learner recovery: SIGKILL the learner actor's process of a running `arl train`
(as an OOM kill or a segfault would end it); the driver rebuilds the learner from the last
checkpoint, plays the lost steps again and ends with the uninterrupted run's metrics."""

from __future__ import annotations

import json
import math
import pathlib
import signal
import subprocess
import time

import pytest

from tests.builders import metrics_rows, subprocess_env, train_command

psutil = pytest.importorskip("psutil")

ROOT = pathlib.Path(__file__).resolve().parents[2]
STEPS = 12
RESTARTS = "learner/restarts"


def _command(model_dir, out_dir, *extra):
    return train_command(model_dir, out_dir, STEPS, "learner.checkpoint.every=4", *extra)


_env = subprocess_env


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
            if child.cmdline() and child.cmdline()[0].startswith("ray::LearnerActor"):
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


def _run_with_kills(command: list[str], out_dir, *kills: tuple[int, int, bool]
                    ) -> tuple[int, str]:
    """Run `command`, killing a learner at each (restarts, steps, last) of `kills` (see
    `_kill_after`); its exit status and stderr."""
    proc = subprocess.Popen(command, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        for restarts, steps, last in kills:
            _kill_after(proc, out_dir, restarts, steps, last)
        _, stderr = proc.communicate(timeout=600)
    finally:
        proc.kill()
    return proc.returncode, stderr


def _without_restarts(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != RESTARTS} for r in rows]


@pytest.mark.slow
def test_two_learner_kills_in_a_sync_run_give_the_uninterrupted_metrics(tmp_path,
                                                                       warm_model_dir):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    done = subprocess.run(_command(warm_model_dir, whole), cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    code, stderr = _run_with_kills(_command(warm_model_dir, broken), broken,
                                   (0, 6, False),  # between checkpoints 4 and 8
                                   (1, 4, False))  # after the replay from step 4
    assert code == 0, stderr[-3000:]
    assert stderr.count("rebuilding the learner from") == 2, stderr[-3000:]
    rows = _rows(broken)
    assert [r["step"] for r in rows] == list(range(STEPS))
    assert rows[-1][RESTARTS] == 2
    assert _without_restarts(rows) == _without_restarts(_rows(whole))


@pytest.mark.slow
def test_a_learner_death_past_max_restarts_stops_with_a_resumable_checkpoint(
        tmp_path, warm_model_dir):
    code, stderr = _run_with_kills(
        _command(warm_model_dir, tmp_path, "learner.checkpoint.max_restarts=0"), tmp_path,
        (0, 5, False))
    assert code == 3, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert "learner.checkpoint.max_restarts=0" in last, last
    assert "resume=auto continues from" in last, last
    resumed = subprocess.run(_command(warm_model_dir, tmp_path, "resume=auto"), cwd=ROOT,
                             env=_env(), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in _rows(tmp_path)] == list(range(STEPS))


@pytest.mark.slow
def test_one_rank_of_a_zero2_group_killed_the_group_is_rebuilt_and_the_run_completes(
        tmp_path, warm_model_dir):
    pytest.importorskip("deepspeed")
    command = _command(warm_model_dir, tmp_path, "steps=8", "learner.resources.num_workers=2",
                       "learner.resources.backend=deepspeed", "learner.resources.zero_stage=2",
                       "ray.num_cpus=3",
                       "learner.resources.collective_timeout_s=60")
    code, stderr = _run_with_kills(command, tmp_path, (0, 5, True))  # rank 1; 0 survives
    assert code == 0, stderr[-3000:]
    rows = _rows(tmp_path)
    assert [r["step"] for r in rows] == list(range(8))
    assert rows[-1][RESTARTS] == 1
    assert all(math.isfinite(r["learner/grad_norm"]) for r in rows)


@pytest.mark.slow
def test_async_run_survives_a_learner_kill_within_its_staleness_bound(tmp_path,
                                                                      warm_model_dir):
    command = _command(warm_model_dir, tmp_path, "mode=async", "max_staleness=1",
                       "rollout.num_workers=2", "ray.num_cpus=3")
    code, stderr = _run_with_kills(command, tmp_path, (0, 6, False))
    assert code == 0, stderr[-3000:]
    rows = _rows(tmp_path)
    assert [r["step"] for r in rows] == list(range(STEPS))
    assert rows[-1][RESTARTS] == 1
    # What was generated before the death never reaches the restored learner: every batch
    # after it is within the bound of the restored versions, and nothing is trained twice.
    assert all(0 <= r["async/staleness_mean"] and r["async/staleness_max"] <= 1 for r in rows)
    assert all(r["learner/duplicate_trajectories"] == 0 for r in rows)
