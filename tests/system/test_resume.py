"""Exact resume: kill -9 a CPU run of configs/ci.yaml at a random step, run the same command
with resume=auto, and get the uninterrupted run's metrics and final weights bit for bit."""

from __future__ import annotations

import hashlib
import pathlib
import signal
import subprocess
import time

import pytest

from tests.builders import metrics_rows, subprocess_env, train_command

ROOT = pathlib.Path(__file__).resolve().parents[2]
STEPS = 6
KILL_AFTER = 3  # steps logged before the kill: a fixed point, the same in every run
# Wall-clock columns differ between any two runs; everything else must not.


def _command(model_dir, out_dir, *extra):
    return train_command(model_dir, out_dir, STEPS, "learner.checkpoint.every=1", *extra)


_env = subprocess_env


def _rows(out_dir):
    return metrics_rows(pathlib.Path(out_dir) / "ci")


def _final_weights_sha(out_dir):
    path = pathlib.Path(out_dir) / "ci" / "checkpoints" / f"step_{STEPS:06d}" / "model.safetensors"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the training process, as a power cut would; then reap the Ray processes it
    started so they do not outlive the test."""
    psutil = pytest.importorskip("psutil")
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    time.sleep(1)
    for child in children:
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.mark.slow
def test_kill_9_then_resume_auto_matches_an_uninterrupted_run(tmp_path, warm_model_dir):
    whole, broken = tmp_path / "whole", tmp_path / "broken"
    done = subprocess.run(_command(warm_model_dir, whole), cwd=ROOT, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    kill_after = KILL_AFTER  # steps logged before kill -9
    proc = subprocess.Popen(_command(warm_model_dir, broken), cwd=ROOT, env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = broken / "ci" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and metrics.read_text().count("\n") >= kill_after:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    _kill_tree(proc)
    assert metrics.read_text().count("\n") < STEPS

    resumed = subprocess.run(_command(warm_model_dir, broken, "resume=auto"), cwd=ROOT,
                             env=_env(), capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in _rows(broken)] == list(range(STEPS))
    assert _rows(broken) == _rows(whole)
    assert _final_weights_sha(broken) == _final_weights_sha(whole)


def test_sigterm_saves_a_checkpoint_then_exits(tmp_path, warm_model_dir):
    from arl.model.checkpoint.store import load_checkpoint

    command = _command(warm_model_dir, tmp_path, "steps=500", "learner.checkpoint.every=0")
    proc = subprocess.Popen(command, cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "ci" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and metrics.read_text().count("\n") >= 2:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)  # what `ray job stop` sends
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    steps = metrics.read_text().count("\n")
    assert f"stopped by SIGTERM after step {steps}" in stderr
    checkpoints = sorted((tmp_path / "ci" / "checkpoints").iterdir())
    assert [p.name for p in checkpoints] == ["latest", f"step_{steps:06d}"]
    assert checkpoints[0].read_text() == f"step_{steps:06d}\n"
    assert load_checkpoint(str(checkpoints[1])).step == steps


@pytest.mark.slow
def test_a_truncated_newest_checkpoint_names_the_intact_one_and_resume_step_n_uses_it(
        tmp_path, warm_model_dir):
    first = subprocess.run(_command(warm_model_dir, tmp_path, "steps=4",
                                    "learner.checkpoint.every=2"),
                           cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    folder = tmp_path / "ci" / "checkpoints"
    weights = folder / "step_000004" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])

    refused = subprocess.run(_command(warm_model_dir, tmp_path, "resume=auto"), cwd=ROOT,
                             env=_env(), capture_output=True, text=True, timeout=600)
    assert refused.returncode == 3, refused.stderr[-3000:]
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr[-3000:]
    assert str(weights) in lines[0] and "truncated" in lines[0]
    assert f"newest intact checkpoint is {folder / 'step_000002'}" in lines[0]
    assert "resume=step_000002" in lines[0]

    resumed = subprocess.run(_command(warm_model_dir, tmp_path, "resume=step_000002"),
                             cwd=ROOT, env=_env(), capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [r["step"] for r in _rows(tmp_path)] == list(range(STEPS))
    assert (folder / "step_000004.aside" / "model.safetensors").exists()  # kept, not read
    assert (folder / "latest").read_text() == f"step_{STEPS:06d}\n"
