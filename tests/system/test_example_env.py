"""A user's own env, from outside the package: examples/guess_number.py passes check_env and
trains with `arl train ... env.name=examples.guess_number:make` on a real local Ray cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from arl.config import ConfigError, load_config
from arl.env_spec import resolve_env
from arl.envs.check import check_spec
from tests.builders import metrics_rows

ROOT = Path(__file__).resolve().parents[2]
NAME = "examples.guess_number:make"


def test_example_env_passes_check_env_and_its_keys_are_typed():
    cfg = load_config([str(ROOT / "configs/ci.yaml")], [f"env.name={NAME}", "env.high=50"],
                      check_paths=False)
    assert type(cfg.env).__name__ == "GuessConfig" and cfg.env.high == 50
    spec = resolve_env(NAME)
    assert spec.outcomes == ("found", "missed", "invalid")
    check_spec(spec, cfg.env, seeds=range(20))
    with pytest.raises(ConfigError, match="env.hihg.*unknown key of env.*did you mean 'env.high'"):
        load_config([], [f"env.name={NAME}", "env.hihg=3"], check_paths=False)


def test_example_env_trains_from_outside_the_package(tmp_path, warm_model_dir):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ARL_HOME": str(tmp_path / "home")}
    cmd = [sys.executable, "-m", "arl.app.cli", "train", str(ROOT / "configs/ci.yaml"),
           f"env.name={NAME}", f"model.path={warm_model_dir}", f"output_dir={tmp_path}",
           "rollout.max_turns=3", "ray.address=local", "wandb.mode=offline"]
    out = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    rows = metrics_rows(tmp_path / "ci", untimed=False)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows:  # the env's own outcome kinds, and the learner did its work
        kinds = [row[f"rollout/outcome_{k}"] for k in ("found", "missed", "invalid")]
        assert sum(kinds) == pytest.approx(1.0)
        assert row["learner/loss"] is not None and row["rollout/turns_per_episode"] >= 1
