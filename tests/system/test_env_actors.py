"""Env-runner actors (`rollout.env_actors`) on a real local Ray cluster: the same episodes as
the rollout worker's own loop, and a runner killed three times costs nothing."""

from __future__ import annotations

import os

import pytest

from arl.app.train import train
from tests.builders import ci_config, metrics_rows

pytestmark = pytest.mark.slow  # several runs on a Ray cluster each

# Two runners and the worker and the learner: more logical CPUs than the machine has cores.
RUNNERS = ("rollout.env_actors=2", "ray.num_cpus=4")


def _run(model_dir, out_dir, *overrides):
    train(ci_config(model_dir, out_dir, *overrides))
    return metrics_rows(out_dir / "ci")


def test_env_runners_play_exactly_the_workers_own_episodes(tmp_path, warm_model_dir):
    alone = _run(warm_model_dir, tmp_path / "alone", "ray.num_cpus=4")
    runners = _run(warm_model_dir, tmp_path / "runners", *RUNNERS)
    for row in runners:
        assert row.pop("rollout/env_actor_restarts") == 0.0
    assert runners == alone


def test_agent_functions_on_env_runners_play_the_same_episodes(tmp_path, warm_model_dir):
    agent = ("env.agent=examples.env_agent:run_agent",)
    alone = _run(warm_model_dir, tmp_path / "alone", "ray.num_cpus=4", *agent)
    runners = _run(warm_model_dir, tmp_path / "runners", *RUNNERS, *agent)
    for row in runners:
        row.pop("rollout/env_actor_restarts")
    assert runners == alone


def test_killed_env_runner_is_rebuilt_and_its_collect_replayed(tmp_path, warm_model_dir):
    import signal
    import threading
    import time

    import psutil

    metrics_path = tmp_path / "ci" / "metrics.jsonl"
    killed = []

    def steps_logged() -> int:
        return metrics_path.read_text().count("\n") if metrics_path.exists() else 0

    def playing_runner() -> int | None:
        """The pid of a runner in the middle of playing its part (Ray titles the process
        after the method it runs), if one is."""
        for proc in psutil.process_iter(["cmdline"]):
            if (proc.info["cmdline"] or [""])[0].startswith("ray::EnvRunner.play"):
                return proc.pid
        return None

    def killer():  # SIGKILL a runner mid-play after steps 1, 4 and 7
        for after in (1, 4, 7):
            while steps_logged() < after or (pid := playing_runner()) is None:
                time.sleep(0.005)
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    train(ci_config(warm_model_dir, tmp_path, "steps=12", *RUNNERS))
    thread.join(timeout=60)
    assert len(killed) == 3 and len(set(killed)) == 3
    rows = metrics_rows(tmp_path / "ci")
    assert [r["step"] for r in rows] == list(range(12))
    assert sum(r["rollout/env_actor_restarts"] for r in rows) == 3  # one replay per kill
    assert all(r["learner/duplicate_trajectories"] == 0.0 for r in rows)
