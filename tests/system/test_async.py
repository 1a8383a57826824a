"""Async mode: identical to sync at max_staleness=0; within the bound, counted and never
twice with slow workers."""

from __future__ import annotations

import hashlib

import pytest

from arl.actors.hosts import LocalHost
from arl.app.train import train
from arl.config import ConfigError
from tests.builders import ci_config, metrics_rows


def _weights_hash(run_dir, step):
    path = run_dir / "checkpoints" / f"step_{step:06d}" / "model.safetensors"
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_async_at_staleness_zero_is_sync_exactly(tmp_path, warm_model_dir):
    """On Ray and in-process alike: the pipeline uses only the cluster's interface."""
    steps = 4
    runs = (("sync", "sync", None), ("async", "async", None), ("local", "async", LocalHost()))
    for name, mode, host in runs:
        train(ci_config(warm_model_dir, tmp_path, f"run_name={name}", f"mode={mode}",
                        "max_staleness=0", f"steps={steps}", "rollout.num_workers=2",
                        "rollout.groups_per_step=2", "ray.num_cpus=3"), host)
    sync = metrics_rows(tmp_path / "sync")
    assert len(sync) == steps
    for name in ("async", "local"):
        assert metrics_rows(tmp_path / name) == sync  # every metric, histograms included
        assert _weights_hash(tmp_path / name, steps) == _weights_hash(tmp_path / "sync", steps)


@pytest.mark.slow
def test_slow_workers_stay_within_the_bound_and_nothing_is_trained_twice(tmp_path,
                                                                         warm_model_dir):
    cfg = ci_config(warm_model_dir, tmp_path, "mode=async", "max_staleness=1", "steps=10",
               "rollout.num_workers=2", "rollout.groups_per_step=2",
               "rollout.fault_delay_s=1.5", "ray.num_cpus=3")
    train(cfg)
    rows = metrics_rows(tmp_path / "ci")
    assert [r["step"] for r in rows] == list(range(10))
    assert all(r["async/staleness_max"] <= 1 for r in rows)
    assert any(r["async/staleness_max"] == 1 for r in rows)  # it did run ahead
    assert sum(r["async/dropped_stale"] for r in rows) > 0  # slow chunks were overtaken
    assert all(r["learner/duplicate_trajectories"] == 0 for r in rows)
    # Every batch was whole: 2 groups of 4 from fresh chunks.
    assert all(sum(r["rollout/action_hist"]["counts"]) <= 8 for r in rows)
    assert all(r["gspo/ratio_hist"]["counts"] and sum(r["gspo/ratio_hist"]["counts"]) == 8
               for r in rows if r["rollout/masked_groups"] == 0)


def test_too_few_cpus_fail_fast_instead_of_waiting_forever(tmp_path, warm_model_dir):
    cfg = ci_config(warm_model_dir, tmp_path, "rollout.num_workers=2", "ray.num_cpus=2")
    import ray

    with pytest.raises(RuntimeError, match="reserve 3 CPUs .* cluster has 2"):
        train(cfg)
    assert not ray.is_initialized(), "the embedded cluster is shut down on the error too"


def test_async_needs_equal_shares(tmp_path, warm_model_dir):
    with pytest.raises(ConfigError, match="rollout.groups_per_step"):
        ci_config(warm_model_dir, tmp_path, "mode=async", "rollout.num_workers=2",
             "rollout.groups_per_step=3")


def test_deterministic_async_runs_and_a_resumed_one_log_the_same_metrics(tmp_path,
                                                                         warm_model_dir):
    """Two workers whose chunks finish in whatever order the machine gives; step k trains on
    version k - 1's rollouts in every run. A run stopped after 2 steps and resumed plays the
    older version its checkpoint kept, as the unstopped run did."""
    common = ("mode=async", "max_staleness=1", "deterministic=true", "rollout.num_workers=2",
              "rollout.groups_per_step=2", "rollout.fault_delay_s=0.4", "ray.num_cpus=3",
              "learner.checkpoint.every=1")
    for name, steps, resume in (("a", 4, "never"), ("b", 4, "never"), ("c", 2, "never"),
                                ("c", 4, "auto")):
        train(ci_config(warm_model_dir, tmp_path, f"run_name={name}", f"steps={steps}",
                        f"resume={resume}", *common))
    a = metrics_rows(tmp_path / "a")
    # every trajectory of step k was played by version k - 1 (version 0 at step 0); without
    # pinning, these workers' chunks run ahead and some are dropped as stale
    assert [(r["async/staleness_mean"], r["async/staleness_max"]) for r in a] == [
        (0, 0), (1, 1), (1, 1), (1, 1)]
    assert all(r["async/dropped_stale"] == 0 for r in a)
    assert metrics_rows(tmp_path / "b") == a
    assert metrics_rows(tmp_path / "c") == a
    assert _weights_hash(tmp_path / "c", 4) == _weights_hash(tmp_path / "a", 4)
    kept = sorted(p.name for p in (tmp_path / "c" / "checkpoints" / "step_000002" / "policies"
                                   ).iterdir())
    assert kept == ["v1.safetensors"]  # step 2 plays version 1


def test_two_sync_runs_log_the_same_metrics(tmp_path, warm_model_dir):
    for name in ("a", "b"):
        train(ci_config(warm_model_dir, tmp_path, f"run_name={name}"), LocalHost())
    assert metrics_rows(tmp_path / "a") == metrics_rows(tmp_path / "b")
