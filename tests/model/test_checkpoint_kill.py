"""SIGKILL while checkpoints are being written, 20 times at random moments: the last
complete checkpoint is always the one a resume finds, and it always loads."""

from __future__ import annotations

import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

from arl.model.checkpoint.pointer import read_latest
from arl.model.checkpoint.runs import latest_checkpoint, step_in_name
from arl.model.checkpoint.store import load_checkpoint

ROOT = pathlib.Path(__file__).resolve().parents[2]
TRIALS = 20

# Writes step_1, step_2, ... forever; prints each step once its checkpoint is complete.
WRITER = """
import sys
import torch
from arl.model.checkpoint.store import LearnerState, save_checkpoint

param = torch.nn.Parameter(torch.zeros(1_000_000))  # 4 MB weights + 8 MB AdamW moments
optimizer = torch.optim.AdamW([param], lr=1e-3)
step = int(sys.argv[2])
while True:
    step += 1
    param.grad = torch.full_like(param, float(step))
    optimizer.step()
    state = LearnerState({"w": param.detach().clone()}, optimizer.state_dict(), step, 0)
    save_checkpoint(f"{sys.argv[1]}/step_{step:06d}", state, step, {"step": step})
    print(step, flush=True)
"""


@pytest.mark.slow
def test_sigkill_during_checkpoint_writes_never_loses_the_last_complete_one(tmp_path):
    rng = random.Random(0)
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    completed = 0
    for _ in range(TRIALS):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(directory), str(completed)],
                                  cwd=ROOT, stdout=subprocess.PIPE, text=True)
        writer.stdout.readline()  # one checkpoint done: the writer is up to speed
        time.sleep(rng.uniform(0.0, 0.3))  # a few checkpoints in, mid-write or between
        writer.send_signal(signal.SIGKILL)
        out, _ = writer.communicate(timeout=30)
        path = latest_checkpoint(str(directory))
        checkpoint = load_checkpoint(path)  # verifies every hash: it must be whole
        assert checkpoint.step == step_in_name(path) == checkpoint.extra_json["step"]
        # Any checkpoint it reported complete is there; at most one more may have landed
        # between the write and the report.
        reported = [int(x) for x in out.split()] or [completed + 1]
        assert checkpoint.step in (max(reported), max(reported) + 1)
        assert float(checkpoint.state.model["w"][0]) != 0.0
        # The pointer is written last: it names a whole checkpoint, the newest or the one
        # before it (if the kill fell between the rename and the pointer's update).
        pointed = load_checkpoint(read_latest(directory))
        assert pointed.step in (checkpoint.step, checkpoint.step - 1)
        completed = checkpoint.step
    assert completed >= TRIALS
