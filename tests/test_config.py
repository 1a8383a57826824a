"""The one config schema: defaults, files, overrides, and errors that name the key."""

import pathlib
import subprocess
import sys
import time

import pytest

from arl.config import Config, ConfigError, load_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_validates(path):
    cfg = load_config([str(path)], check_paths=False)
    assert isinstance(cfg, Config)


def test_files_then_overrides(tmp_path):
    a = tmp_path / "a.yaml"
    a.write_text("seed: 3\nrollout:\n  group_size: 4\n")
    b = tmp_path / "b.yaml"
    b.write_text("rollout:\n  group_size: 6\n")
    cfg = load_config([str(a), str(b)], ["learner.lr=0.5", "run_name=x"], check_paths=False)
    assert (cfg.seed, cfg.rollout.group_size, cfg.learner.lr, cfg.run_name) == (3, 6, 0.5, "x")
    assert cfg.learner.clip_low == 3e-4 and cfg.learner.clip_high == 4e-4  # paper defaults


@pytest.mark.parametrize(
    "override, key",
    [
        ("no_such.key=1", "no_such.key"),
        ("rollout.nope=1", "rollout.nope"),
        ("rollout.group_size=1", "rollout.group_size"),
        ("rollout.group_size=abc", "rollout.group_size"),
        ("rollout.groups_per_step=-2", "rollout.groups_per_step"),
        ("learner.clip_low=0", "learner.clip_low"),
        ("learner.clip_high=-1e-4", "learner.clip_high"),
        ("learner.loss=ppo", "learner.loss"),
        ("learner.mini_batches=3", "learner.mini_batches"),
        ("env.name=chess", "env.name"),
        ("wandb.mode=sometimes", "wandb.mode"),
        ("rollout.top_p=1.5", "rollout.top_p"),
        ("run_name=../x", "run_name"),
        ("seed", "seed"),
    ],
)
def test_bad_values_name_their_key(override, key):
    with pytest.raises(ConfigError) as err:
        load_config([], [override], check_paths=False)
    assert err.value.key == key
    assert key in str(err.value)


def test_unknown_key_in_file_is_named(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("learner:\n  lrate: 0.1\n")
    with pytest.raises(ConfigError) as err:
        load_config([str(bad)], check_paths=False)
    assert err.value.key == "learner.lrate"


def test_missing_model_dir_is_named(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config([], [f"model.path={tmp_path}/nothing"])
    assert err.value.key == "model.path"


def test_cli_rejects_unknown_key_fast_without_ray():
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "arl.cli", "train", "configs/ci.yaml", "no_such.key=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )
    elapsed = time.monotonic() - start
    assert out.returncode != 0
    assert "no_such.key" in out.stderr
    assert "Ray" not in out.stderr + out.stdout  # nothing started
    assert elapsed < 5, elapsed
