"""`ray job submit -- arl train configs/ci.yaml` against a real head node started for the test."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(sys.executable).parent


def _run(*args, timeout=300, env=None):
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def head_node():
    # The cluster enables Ray's token authentication; the job client must send the token.
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "RAY_AUTH_MODE": "token"}
    env.pop("RAY_ADDRESS", None)
    port = "6391"
    started = _run(
        str(BIN / "ray"), "start", "--head", "--num-cpus", "2", "--port", port,
        "--dashboard-host", "127.0.0.1", "--node-ip-address", "127.0.0.1",
        # Ray's socket paths must stay under 107 bytes: a short temp dir, not pytest's.
        "--temp-dir", tempfile.mkdtemp(prefix="ray", dir="/tmp"), "--disable-usage-stats",
        env=env,
    )
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield env
    finally:
        _run(str(BIN / "ray"), "stop", "--force", env=env)


def test_ray_job_submit_runs_training(head_node, warm_model_dir, tmp_path):
    assert shutil.which("ray", path=head_node["PATH"])
    out_dir = tmp_path / "runs"
    submitted = _run(
        str(BIN / "ray"), "job", "submit", "--address", "http://127.0.0.1:8265",
        "--working-dir", ".", "--",
        "arl", "train", "configs/ci.yaml", f"model.path={warm_model_dir}",
        f"output_dir={out_dir}",
        env=head_node, timeout=600,
    )
    logs = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, logs[-4000:]
    assert "succeeded" in logs, logs[-4000:]
    assert "done: 3 steps" in logs, logs[-4000:]
    assert (out_dir / "ci" / "metrics.jsonl").read_text().count("\n") == 3
