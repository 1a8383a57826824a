"""A multi-turn agent function with two tools trains on a real local Ray cluster through
`arl train`, and refused requests fail only their own episodes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from arl.config import ConfigError, load_config
from tests.builders import CI, metrics_rows

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_agent_function_trains_three_steps_on_ray_and_hostile_episodes_fail(tmp_path,
                                                                             warm_model_dir):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ARL_HOME": str(tmp_path / "home")}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "arl.app.cli", "train", str(ROOT / CI),
           "env.agent=tests.system.agent_fns:mixed", f"model.path={warm_model_dir}",
           f"output_dir={tmp_path}", "rollout.max_turns=3", "rollout.groups_per_step=4",
           "ray.address=local", "wandb.mode=offline"]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    rows = metrics_rows(tmp_path / "ci", untimed=False)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows:
        assert row["rollout/agent_request_errors"] == 4  # one group of 4 asked for T = 0.3
        assert row["rollout/failed_episodes"] == 4 and row["rollout/masked_groups"] == 1
        assert row["rollout/trained_groups"] <= 3 and row["learner/loss"] is not None
        assert row["rollout/turns_per_episode"] >= 0.75 and "agent/multiplies" in row
        assert row["rollout/prefix_splits"] == 0


def test_a_stuck_agent_times_out_and_every_step_completes(tmp_path, warm_model_dir):
    """An agent function that never returns ends its episode after
    rollout.episode_timeout_s of its own time; its group is not trained on, the step goes
    on (`arl train` on a real local Ray cluster)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ARL_HOME": str(tmp_path / "home")}
    env.pop("RAY_ADDRESS", None)
    cmd = [sys.executable, "-m", "arl.app.cli", "train", str(ROOT / CI), "steps=2",
           "env.agent=tests.system.agent_fns:stuck", f"model.path={warm_model_dir}",
           f"output_dir={tmp_path}", "rollout.max_turns=3", "rollout.episode_timeout_s=2",
           "ray.address=local"]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    rows = metrics_rows(tmp_path / "ci", untimed=False)
    assert [r["step"] for r in rows] == [0, 1]
    for row in rows:  # group 1 of 2 (4 episodes) stuck every step
        assert row["rollout/timed_out_episodes"] == 4 and row["rollout/failed_episodes"] == 4
        assert row["rollout/masked_groups"] == 1 and row["learner/loss"] is not None


def test_a_missing_agent_function_fails_before_ray_names_the_key(tmp_path):
    with pytest.raises(ConfigError, match="env.agent.*no module 'nowhere'"):
        load_config([str(ROOT / CI)], ["env.agent=nowhere.agent:run"], check_paths=False)
    with pytest.raises(ConfigError, match="env.agent.*must be an async function"):
        load_config([str(ROOT / CI)], ["env.agent=json:dumps"], check_paths=False)
