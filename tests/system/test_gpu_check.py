"""`make gpu-check` (bench/gpu_check.py) before any GPU: without one it exits 2 with one line,
`--dry-run` lists every step and what it needs, and `--cpu` runs the whole driver with each
step on the CPU engine, gloo and the CPU learner where its code path allows."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]
STEPS = ["versions", "gpu-tests", "engine", "train", "deepspeed-bf16", "nccl-sync",
         "sync-time", "generation"]


def _check(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "bench/gpu_check.py", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_it_exits_2_with_one_line():
    done = _check()
    assert done.returncode == 2
    assert done.stdout == "" and done.stderr.count("\n") == 1
    assert done.stderr.startswith("gpu-check: no CUDA GPU here")


def test_dry_run_lists_every_step_and_what_it_needs():
    done = _check("--dry-run")
    assert done.returncode == 0
    names = [line.split(":")[0].split(". ")[1] for line in done.stdout.splitlines()
             if line[:1].isdigit()]
    assert names == STEPS
    assert done.stdout.count("needs:") == len(STEPS)


def test_the_vllm_floor_it_names_is_the_engines():
    from arl.rollout.engines.vllm import VLLM_FLOOR

    assert f"vllm>={VLLM_FLOOR} " in _check("--dry-run").stdout
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'vllm = ["vllm>={VLLM_FLOOR}"]' in pyproject


@pytest.mark.slow
def test_the_driver_runs_end_to_end_on_the_cpu(tmp_path):
    report_path = tmp_path / "report.json"
    done = _check("--cpu", "--out", str(report_path), timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(report_path.read_text())
    status = {s["step"]: s["status"] for s in report["steps"]}
    assert status == {"versions": "passed", "gpu-tests": "skipped", "engine": "passed",
                      "train": "passed", "deepspeed-bf16": "passed", "nccl-sync": "passed",
                      "sync-time": "passed", "generation": "skipped"}
    figures = {s["step"]: s["figures"] for s in report["steps"]}
    assert figures["deepspeed-bf16"]["products"] == "bf16"
    assert set(figures["nccl-sync"]) == {"sync_s_1w", "sync_s_2w"}  # gloo, 1 and 2 workers
    assert figures["train"]["step_s"] > 0 and figures["sync-time"]["total_s"] > 0
    assert "gpu-check on CPU" in done.stdout  # the summary
