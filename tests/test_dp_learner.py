"""Data-parallel learners (learner.num_workers = M): M Ray actors in one gloo group take the
same update as one learner, and the loop trains with them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from arl.config import LearnerConfig, ModelConfig, load_config
from arl.train import train
from arl.types import Trajectory


def _trajectories(count: int, seed: int) -> list[Trajectory]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(rng.integers(12, 30))
        mask = np.zeros(n, dtype=np.int8)
        mask[n // 3:] = 1
        out.append(Trajectory(
            token_ids=rng.integers(7, 300, n).astype(np.int32), loss_mask=mask,
            sampler_logprobs=np.where(mask == 1, -rng.uniform(0.5, 4.0, n), 0.0
                                      ).astype(np.float32),
            reward=0.0, group_id=i // 4, policy_version=0, num_turns=1, num_tool_calls=1,
            num_invalid_calls=0, episode_id=i + 1000 * seed))
    return out


@pytest.fixture
def local_ray():
    import ray

    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _group(tiny_model_dir: str, world: int):
    from actors.group import ActorGroup
    from actors.learner import LearnerWorker

    # lr large enough that two steps move every weight; 3 mini-batches of 16 over 48
    # sequences, micro-batches of 4: a rank of 2 gets 8 rows of each mini-batch.
    cfg = LearnerConfig(lr=1e-3, mini_batches=3, micro_batch_size=4)
    group = ActorGroup(LearnerWorker, [(ModelConfig(path=tiny_model_dir, dtype="float32"),
                                        cfg, 10, 0, 1.0, 1)] * world, num_cpus=1)
    if world > 1:
        address, port = group.get(group.submit_one(0, "rendezvous", ()))
        group.get(group.submit("join_group", [(r, world, address, port) for r in range(world)]))
    return group


def _initial(model_dir: str):
    from learner.model import load_model

    model, _ = load_model(model_dir, "float32")
    return model.state_dict()


def test_two_learners_take_the_same_update_as_one(local_ray, tiny_model_dir):
    ray = local_ray
    one, two = _group(tiny_model_dir, 1), _group(tiny_model_dir, 2)
    for step in range(2):
        batch = ray.put(_trajectories(48, seed=step))
        advantages = np.random.default_rng(step + 7).normal(size=48).astype(np.float32)
        keep = np.ones(48, dtype=bool)
        m1 = one.get(one.submit("step", [(advantages, keep, batch)]))[0]
        m2 = two.get(two.submit("step", [(advantages, keep, batch)] * 2))
        floats = [k for k, v in m2[0].items() if isinstance(v, float)]
        assert all(m2[0][k] == m2[1][k] for k in floats), "both ranks report the whole batch"
        for key in ("learner/loss", "learner/grad_norm", "gspo/ratio_mean",
                    "gspo/clip_fraction_low", "gspo/clip_fraction_high",
                    "rollout/sampler_logprob_gap", "perf/train_tokens"):
            assert m2[0][key] == pytest.approx(m1[key], rel=1e-5, abs=1e-7), key
    w1 = one.get(one.submit_one(0, "export_weights", ()))
    w2 = [two.get(two.submit_one(r, "export_weights", ())) for r in range(2)]
    for name in w1:
        np.testing.assert_array_equal(w2[0][name], w2[1][name])  # ranks never drift apart
        np.testing.assert_allclose(w2[0][name], w1[name], atol=2e-6)
    start = {k: v.detach().numpy() for k, v in _initial(tiny_model_dir).items()}
    assert all(not np.array_equal(w1[k], start[k]) for k in w1), "two steps moved every weight"
    one.close()
    two.close()


def test_loop_trains_with_two_learners(tmp_path, warm_model_dir):
    cfg = load_config(["configs/ci.yaml"], [
        f"model.path={warm_model_dir}", f"output_dir={tmp_path}", "ray.address=local",
        "learner.num_workers=2", "ray.num_cpus=3", "learner.checkpoint_every=1"])
    train(cfg, use_ray=True)
    with open(tmp_path / "ci" / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert all(np.isfinite(r["learner/grad_norm"]) for r in rows)
    assert (tmp_path / "ci" / "checkpoints" / "step_000003" / "model.safetensors").is_file()
