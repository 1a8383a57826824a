"""Every command of the README, run as a new user runs it, in the order a reader meets them.

Each line of the README's bash blocks must be covered here, or this test fails: a README
command nobody runs cannot drift. Commands too long for CI run with tiny overrides appended
(said next to each); `make demo` runs its two commands (the Makefile's recipe) with them,
`make test` is CI itself, and the scale-out block runs in test_ray_job.py against a real
head node. The commands run in a copy of configs/ and examples/ (runs/ and exported/ land
there), with ARL_HOME holding the demo's warm start as `make demo` leaves it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.builders import subprocess_env
from tests.system.test_ray_job import README, ROOT

pytestmark = pytest.mark.slow
BIN = os.path.dirname(sys.executable)
TINY_WARMSTART = "warmstart.examples=64 warmstart.eval_episodes=4"  # seconds, not minutes
TINY_TRAIN = "steps=2 eval.games=1"

# README line -> the command lines that run it here ("" extra: exactly as written).
COVERED = {
    "make demo": [f"arl warmstart configs/warmstart_board.yaml {TINY_WARMSTART} "
                  "warmstart.output=cache:readme-demo-warmstart",  # leaves the warm copy be
                  f"arl train configs/tictactoe_move.yaml {TINY_TRAIN}"],
    "arl train configs/tictactoe_move.yaml": [f"arl train configs/tictactoe_move.yaml "
                                              f"{TINY_TRAIN}"],
    "arl train configs/tictactoe_move.yaml learner.optim.lr=5e-5 steps=100": [
        f"arl train configs/tictactoe_move.yaml learner.optim.lr=5e-5 steps=100 {TINY_TRAIN}"],
    "arl train configs/tictactoe_move.yaml resume=auto": [
        "arl train configs/tictactoe_move.yaml resume=auto steps=3 eval.games=1"],
    "arl eval --checkpoint runs/tictactoe_move --opponent minimax --games 200": [
        "arl eval --checkpoint runs/tictactoe_move --opponent minimax --games 200 --games 2"],
    "arl warmstart configs/warmstart_games.yaml": [
        f"arl warmstart configs/warmstart_games.yaml {TINY_WARMSTART}"],
    "PYTHONPATH=. arl warmstart examples/guess_number_warmstart.yaml": [
        f"PYTHONPATH=. arl warmstart examples/guess_number_warmstart.yaml {TINY_WARMSTART}"],
    "PYTHONPATH=. arl train examples/guess_number.yaml env.high=50 steps=5": [
        "PYTHONPATH=. arl train examples/guess_number.yaml env.high=50 steps=5 steps=2"],
}
AS_WRITTEN = (
    "arl eval --checkpoint runs/tictactoe_move --positions configs/positions/win_in_one.jsonl",
    "arl export runs/tictactoe_move/checkpoints/latest exported/",
    "arl config show configs/tictactoe_move.yaml",
)
REPORTS = ("arl doctor configs/tictactoe_move.yaml", "arl plan configs/tictactoe_move.yaml")
ELSEWHERE = ("make test",  # CI runs it; this test is part of it
             "ray start --head --num-cpus 2", "ray stop",  # test_ray_job.py
             "RAY_AUTH_MODE=token ray job submit --working-dir . -- arl train configs/ci.yaml")
SERVED = "arl view runs/tictactoe_move"
TYPED = "arl play runs/tictactoe_move --you O"


def readme_commands() -> list[str]:
    """Every command line of the README's bash blocks, in order, without comments."""
    lines = [re.sub(r"\s+#.*$", "", line).strip()
             for block in re.findall(r"```bash\n(.*?)```", README, re.S)
             for line in block.splitlines()]
    return [line for line in lines if line]


def _sh(line: str, cwd, env, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=900, **kw)


def _ok(out: subprocess.CompletedProcess, line: str, codes=(0,)) -> None:
    assert out.returncode in codes, f"{line}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    assert "Traceback" not in out.stderr, f"{line}\n{out.stderr[-3000:]}"


def _serve_once(line: str, cwd, env) -> None:
    proc = subprocess.Popen(["bash", "-c", f"exec {line}"], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen("http://127.0.0.1:8765/", timeout=5) as reply:
                    assert reply.status == 200 and b"<html" in reply.read(4096).lower()
                    return
            except OSError:
                assert proc.poll() is None, proc.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "arl view did not answer"
                time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_every_readme_command_runs(tmp_path, warm_model_dir):
    work, home = tmp_path / "work", tmp_path / "arl-home"
    for folder in ("configs", "examples"):
        shutil.copytree(ROOT / folder, work / folder)
    shutil.copytree(warm_model_dir, home / "models" / "tiny-warmstart-board")
    env = {**subprocess_env(), "PATH": f"{BIN}:{os.environ['PATH']}", "ARL_HOME": str(home)}
    commands = readme_commands()
    assert "make demo" in commands and TYPED in commands
    for line in commands:
        if line in ELSEWHERE:
            continue
        if line == SERVED:
            _serve_once(line, work, env)
        elif line == TYPED:
            _ok(_sh(line, work, env, input="1\n2\n3\n4\n5\n6\n7\n8\n9\nq\n"), line)
        elif line in REPORTS:  # 1: it found a problem on this machine and listed it
            _ok(_sh(line, work, env), line, codes=(0, 1))
        elif line in AS_WRITTEN:
            _ok(_sh(line, work, env), line)
        else:
            assert line in COVERED, f"a README command no test runs: {line!r}"
            for run in COVERED[line]:
                _ok(_sh(run, work, env), run)
    assert (work / "exported" / "config.json").is_file()
    rows = (work / "runs" / "tictactoe_move" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 3, "resume=auto continued the run by one step"
