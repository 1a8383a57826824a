"""The whole driver: a real local Ray cluster, the tiny model, a few GSPO steps."""

from __future__ import annotations

import glob
import os

import pytest

from arl.actors.hosts import LocalHost
from arl.app.train import train
from tests.builders import ci_config, metrics_rows


def test_driver_on_local_ray_cluster(tmp_path, warm_model_dir):
    import ray

    cfg = ci_config(warm_model_dir, tmp_path, "wandb.mode=offline", "ray.address=local")
    train(cfg)
    assert not ray.is_initialized(), "the embedded cluster is shut down after the run"
    run_dir = tmp_path / "ci"
    rows = metrics_rows(run_dir, untimed=False)
    assert [r["step"] for r in rows] == list(range(cfg.steps))
    required = [
        "rollout/reward_mean", "rollout/response_len", "rollout/tool_calls_per_episode",
        "rollout/invalid_tool_call_rate", "rollout/action_entropy", "gspo/clip_fraction_low",
        "gspo/clip_fraction_high", "gspo/ratio_mean", "learner/loss", "learner/grad_norm",
        "timing/generate", "timing/train", "timing/weight_sync", "timing/other",
        "perf/rollout_tokens_per_s", "perf/train_tokens_per_s",
    ]
    for row in rows:
        missing = [k for k in required if row.get(k) is None]
        assert not missing, missing
    # Policy versions advance: weights were pushed after every step.
    assert rows[-1]["learner/lr"] > 0
    assert (run_dir / "curves.png").stat().st_size > 10_000
    ckpt = run_dir / "checkpoints" / f"step_{cfg.steps:06d}"
    assert (ckpt / "model.safetensors").is_file() and (ckpt / "manifest.json").is_file()
    assert glob.glob(str(run_dir / "wandb" / "offline-run-*" / "*.wandb")), "wandb offline files"


def test_same_seed_same_metrics_and_ray_matches_in_process(tmp_path, warm_model_dir):
    """Two in-process runs and one on Ray: identical reward and loss columns."""
    columns = ("rollout/reward_mean", "learner/loss", "learner/grad_norm", "gspo/ratio_mean")
    results = []
    for name, host in (("a", LocalHost()), ("b", LocalHost()), ("c", None)):
        cfg = ci_config(warm_model_dir, tmp_path, f"run_name={name}", "ray.address=local")
        train(cfg, host)
        rows = metrics_rows(tmp_path / name, untimed=False)
        results.append([[r[k] for k in columns] for r in rows])
    assert results[0] == results[1] == results[2]
    rewards = [r[0] for r in results[0]]
    assert any(r[1] != 0.0 for r in results[0]), "the learner did real work"
    assert min(rewards) < max(rewards) or len(set(rewards)) == 1


def test_previous_run_is_moved_aside(tmp_path, warm_model_dir):
    cfg = ci_config(warm_model_dir, tmp_path, "steps=1")
    train(cfg, host=LocalHost())
    train(cfg, host=LocalHost())
    assert (tmp_path / "ci" / "metrics.jsonl").is_file()
    assert (tmp_path / "ci.prev-1" / "metrics.jsonl").is_file()


@pytest.mark.parametrize("loss", ["gspo_token", "grpo"])
def test_other_losses_run(tmp_path, warm_model_dir, loss):
    cfg = ci_config(warm_model_dir, tmp_path, f"learner.loss.name={loss}", "steps=1")
    metrics = train(cfg, host=LocalHost())
    assert metrics["learner/loss"] == metrics["learner/loss"]  # finite, not NaN


def test_non_finite_steps_in_a_row_save_a_checkpoint_and_stop(tmp_path, warm_model_dir,
                                                              monkeypatch):
    import numpy as np
    import torch

    import arl.app.train as driver
    from arl.model.causal_lm import load_model
    from arl.model.checkpoint.store import load_checkpoint

    def nan_advantages(rewards, eps, scale):
        return torch.full_like(rewards, float("nan"))

    monkeypatch.setattr(driver, "group_advantages", nan_advantages)
    cfg = ci_config(warm_model_dir, tmp_path, "steps=5", "learner.optim.max_nonfinite_in_row=3")
    with pytest.raises(driver.NonFiniteError, match="3 optimizer steps in a row"):
        train(cfg, host=LocalHost())
    rows = metrics_rows(tmp_path / "ci", untimed=False)
    # ci.yaml: 2 mini-batches a step, so the third skipped optimizer step comes in step 2.
    assert [r["learner/skipped_in_row"] for r in rows] == [2.0, 4.0]
    (saved,) = glob.glob(str(tmp_path / "ci" / "checkpoints" / "step_*2"))
    checkpoint = load_checkpoint(saved)
    assert checkpoint.step == 2 and checkpoint.state.skipped_steps == 4
    model, _ = load_model(warm_model_dir, "float32")
    for name, value in model.named_parameters():  # no NaN update ever reached the weights
        assert np.array_equal(checkpoint.state.model[name].numpy(), value.detach().numpy())


def test_env_failures_mask_their_groups_and_the_run_goes_on(tmp_path, warm_model_dir,
                                                           monkeypatch):
    from arl.envs.tictactoe_move import TicTacToeMoveEnv

    real_step = TicTacToeMoveEnv.step
    calls = {"n": 0}

    def flaky_step(self, turn):  # a window of failing episodes in steps 0 and 1
        calls["n"] += 1
        if 3 <= calls["n"] <= 10:
            raise ValueError("board corrupted")
        return real_step(self, turn)

    monkeypatch.setattr(TicTacToeMoveEnv, "step", flaky_step)
    cfg = ci_config(warm_model_dir, tmp_path, "steps=3")
    metrics = train(cfg, host=LocalHost())
    rows = metrics_rows(tmp_path / "ci", untimed=False)
    assert len(rows) == 3 and metrics["rollout/failed_episodes"] == 0.0
    assert [r["rollout/failed_episodes"] for r in rows[:2]] == [6.0, 2.0]  # 8 episodes a step
    assert [r["rollout/masked_groups"] for r in rows[:2]] == [2.0, 1.0]
    # metrics.jsonl writes NaN as null. Step 0 had every group masked: no update, so no loss.
    unset = {"learner/loss", "learner/grad_norm", "learner/entropy"}
    assert all(row[k] is None for k in unset for row in rows[:1])
    for row in rows:
        nan = [k for k, v in row.items() if v is None and not (row is rows[0] and k in unset)]
        assert not nan, nan


def test_resume_auto_continues_and_refuses_a_tampered_checkpoint(tmp_path, warm_model_dir):
    from arl.model.checkpoint.store import CheckpointError, load_checkpoint

    whole = train(ci_config(warm_model_dir, tmp_path / "a", "steps=3"), host=LocalHost())
    train(ci_config(warm_model_dir, tmp_path / "b", "steps=2", "learner.checkpoint.every=1",
               "wandb.mode=offline"), host=LocalHost())
    partial = tmp_path / "b" / "ci" / "checkpoints" / ".step_000003.tmp-x1"
    partial.mkdir()  # what a crash in the middle of a checkpoint write leaves
    resumed = train(ci_config(warm_model_dir, tmp_path / "b", "steps=3", "resume=auto",
                         "wandb.mode=offline"), host=LocalHost())
    assert not partial.exists()
    # wandb continues the same run: both offline run folders carry the checkpoint's run id.
    ids = {p.rsplit("-", 1)[1] for p in glob.glob(str(tmp_path / "b/ci/wandb/offline-run-*"))}
    assert len(glob.glob(str(tmp_path / "b/ci/wandb/offline-run-*"))) == 2 and len(ids) == 1
    extra = load_checkpoint(str(tmp_path / "b/ci/checkpoints/step_000003")).extra_json
    assert extra["wandb_run_id"] == ids.pop()
    assert resumed["rollout/reward_mean"] == whole["rollout/reward_mean"]
    assert resumed["learner/loss"] == whole["learner/loss"]
    assert [r["step"] for r in metrics_rows(tmp_path / "b" / "ci")] == [0, 1, 2]
    assert not glob.glob(str(tmp_path / "b" / "ci.prev-*"))  # resumed in place

    (last,) = glob.glob(str(tmp_path / "b" / "ci" / "checkpoints" / "step_000003"))
    weights = os.path.join(last, "model.safetensors")
    data = bytearray(open(weights, "rb").read())
    data[-1] ^= 0xFF
    open(weights, "wb").write(bytes(data))
    with pytest.raises(CheckpointError, match="model.safetensors"):
        train(ci_config(warm_model_dir, tmp_path / "b", "steps=4", "resume=auto"), host=LocalHost())


@pytest.mark.parametrize("transport", [
    "object_store", pytest.param("gloo", marks=pytest.mark.slow)])
def test_killed_rollout_worker_is_rebuilt_and_the_run_completes(tmp_path, warm_model_dir,
                                                                transport):
    """With a collective weight sync, the rebuilt worker is in no group: it gets the weights
    from the object store, and the group is formed anew for the next broadcast."""
    import signal
    import threading
    import time

    import ray

    cfg = ci_config(warm_model_dir, tmp_path, "steps=12", "ray.address=local",
               f"weight_sync.transport={transport}")
    metrics_path = tmp_path / "ci" / "metrics.jsonl"
    killed = []

    def steps_logged() -> int:
        return metrics_path.read_text().count("\n") if metrics_path.exists() else 0

    def killer():  # SIGKILL the rollout worker's process after steps 1, 4 and 7
        for after in (1, 4, 7):
            while steps_logged() < after:
                time.sleep(0.01)
            actor = ray.get_actor("ci-rollout-0")
            pid = ray.get(actor.__ray_call__.remote(lambda self: os.getpid()))
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    metrics = train(cfg)
    thread.join(timeout=60)
    assert len(killed) == 3 and len(set(killed)) == 3  # three different processes died
    assert metrics["rollout/actor_restarts"] == 3.0
    rows = metrics_rows(tmp_path / "ci", untimed=False)
    assert [r["step"] for r in rows] == list(range(12))
    assert all(r["learner/duplicate_trajectories"] == 0.0 for r in rows)


@pytest.mark.slow
def test_hung_rollout_worker_is_replaced_after_timeout(tmp_path, warm_model_dir):
    import threading
    import time

    import psutil
    import ray

    cfg = ci_config(warm_model_dir, tmp_path, "steps=4", "rollout.timeout_s=15")
    metrics_path = tmp_path / "ci" / "metrics.jsonl"
    hung = []

    def hang():  # after step 1, the worker's next call waits behind a 10-minute sleep
        while not metrics_path.exists() or metrics_path.read_text().count("\n") < 1:
            time.sleep(0.01)
        actor = ray.get_actor("ci-rollout-0")
        hung.append(ray.get(actor.__ray_call__.remote(lambda self: os.getpid())))
        actor.__ray_call__.remote(lambda self: time.sleep(600))

    thread = threading.Thread(target=hang, daemon=True)
    thread.start()
    metrics = train(cfg)
    thread.join(timeout=60)
    assert hung and not psutil.pid_exists(hung[0])  # the sleeper was killed, not waited out
    assert metrics["rollout/actor_restarts"] >= 1.0
    rows = metrics_rows(tmp_path / "ci", untimed=False)
    assert [r["step"] for r in rows] == list(range(4))
    assert all(r["learner/duplicate_trajectories"] == 0.0 for r in rows)


def test_the_learner_never_trains_twice_on_an_episode(warm_model_dir):
    import numpy as np

    from arl.learner.worker import LearnerWorker
    from arl.rollout.worker import RolloutWorker

    cfg = ci_config(warm_model_dir, "unused")
    rollout = RolloutWorker(cfg.model, cfg.rollout, cfg.env, 1)
    learner = LearnerWorker(cfg.model, cfg.learner, 3, 0, 1.0, 1)
    summaries, trajectories = rollout.collect([11, 12], [0, 1], seed=5)
    assert sorted(t.episode_id for t in trajectories) == list(range(8))
    advantages, keep = np.linspace(-1, 1, 8), np.ones(8, dtype=bool)
    first = learner.step(advantages, keep, trajectories)
    again = learner.step(advantages, keep, trajectories[:3], trajectories[3:])  # replayed
    assert first["learner/duplicate_trajectories"] == 0.0
    assert again["learner/duplicate_trajectories"] == 8.0
    assert again["perf/train_tokens"] == 0.0  # nothing trained
