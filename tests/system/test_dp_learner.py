"""Data-parallel learners (learner.resources.num_workers = M): M Ray actors in one gloo group
take the
same update as one learner, and the loop trains with them."""

from __future__ import annotations

import json

import numpy as np
import pytest

from arl.app.train import train
from arl.config import ModelConfig, load_config
from tests.builders import learner_cfg, random_trajectories


def _trajectories(count: int, seed: int):
    return random_trajectories(count, seed, vocab=300, min_len=12, max_len=29)


def _group(tiny_model_dir: str, world: int, backend: str = "torch", zero_stage: int = 2):
    from arl.actors.group import ActorGroup
    from arl.actors.hosts import RayHost
    from arl.actors.learner import LearnerActor

    # lr large enough that two steps move every weight; 3 mini-batches of 13 over 39
    # sequences, micro-batches of 3: of 2 ranks, one gets 7 rows of each mini-batch (3
    # micro-batches) and the other 6 (2, plus a filler pass where the backend needs one).
    cfg = learner_cfg(lr=1e-3, mini_batches=3, micro_batch_size=3, backend=backend,
                        zero_stage=zero_stage)
    group = ActorGroup(LearnerActor, [(ModelConfig(path=tiny_model_dir, dtype="float32"),
                                        cfg, 10, 0, 1.0, 1)] * world, num_cpus=1,
                       host=RayHost())
    if world > 1:
        address, port = group.get(group.submit_one(0, "rendezvous", ()))
        group.get(group.submit("join_group", [(r, world, address, port) for r in range(world)]))
    return group


def _initial(model_dir: str):
    from arl.model.causal_lm import load_model

    model, _ = load_model(model_dir, "float32")
    return model.state_dict()


def _train(group, steps: range = range(2)) -> list[dict]:
    """Learner steps on the same batches (one per step number) for any group; rank 0's
    metrics."""
    import ray

    out = []
    for step in steps:
        batch = ray.put(_trajectories(39, seed=step))
        advantages = np.random.default_rng(step + 7).normal(size=39).astype(np.float32)
        keep = np.ones(39, dtype=bool)
        metrics = group.get(group.submit("step", [(advantages, keep, batch)] * len(group)))
        floats = [k for k, v in metrics[0].items() if isinstance(v, float)]
        assert all(m[k] == metrics[0][k] for m in metrics for k in floats), \
            "every rank reports the whole batch"
        out.append(metrics[0])
    return out


def _weights(group) -> dict[str, np.ndarray]:
    return group.get(group.submit("export_weights", [()] * len(group)))[0]


def _own_params(group, rank: int) -> dict[str, np.ndarray]:
    """The parameters rank `rank` holds itself (whole unless ZeRO-3 partitions them)."""
    ref = group.members[rank].__ray_call__.remote(lambda worker: {
        n: p.detach().numpy().copy() for n, p in worker.learner.model.named_parameters()})
    return group.get(ref)


@pytest.fixture(scope="module")
def reference(tiny_model_dir):
    """Metrics and weights of one torch learner after two steps."""
    import ray

    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False)
    one = _group(tiny_model_dir, 1)
    result = _train(one), _weights(one)
    one.close()
    yield result
    ray.shutdown()


# Summation order differs between one learner and two; Adam magnifies that where a gradient is
# near eps. 3e-5 is 3 % of one AdamW step (lr 1e-3).
ADAM_ATOL = 3e-5
KEYS = ("learner/loss", "learner/grad_norm", "gspo/ratio_mean", "gspo/clip_fraction_low",
        "gspo/clip_fraction_high", "rollout/sampler_logprob_gap", "perf/train_tokens")


@pytest.mark.parametrize("backend,zero_stage", [
    ("torch", 2), pytest.param("deepspeed", 1, marks=pytest.mark.slow), ("deepspeed", 2),
    pytest.param("deepspeed", 3, marks=pytest.mark.slow)])
def test_two_learners_take_the_same_update_as_one(reference, tiny_model_dir, backend,
                                                  zero_stage):
    """M = 2 equals M = 1 of the same backend, and both equal one plain torch learner."""
    ref_metrics, ref_weights = reference
    if backend == "torch":  # the reference is one torch learner
        m1, w1 = reference
    else:
        one = _group(tiny_model_dir, 1, backend, zero_stage)
        m1, w1 = _train(one), _weights(one)
        one.close()
    two = _group(tiny_model_dir, 2, backend, zero_stage)
    m2, w2 = _train(two), _weights(two)
    if backend == "torch" or zero_stage < 3:  # ranks never drift apart
        own = [_own_params(two, r) for r in range(2)]
        for name in own[0]:
            np.testing.assert_array_equal(own[0][name], own[1][name])
    two.close()
    for a, b, ref in zip(m1, m2, ref_metrics, strict=True):
        for key in KEYS:
            assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-7), key
            assert a[key] == pytest.approx(ref[key], rel=1e-5, abs=1e-7), key
    assert set(w1) == set(w2) == set(ref_weights)  # HF names, tied lm_head included
    start = {k: v.detach().numpy() for k, v in _initial(tiny_model_dir).items()}
    for name in w1:
        # Summation order differs; Adam magnifies that where a gradient is near eps, so
        # compare the updates: equal to 1e-3 of their size, and no weight off by ADAM_ATOL
        # (each of the 6 AdamW steps moves a weight by up to lr = 1e-3).
        for got, want in ((w2[name], w1[name]), (w1[name], ref_weights[name])):
            np.testing.assert_allclose(got, want, atol=ADAM_ATOL)
            moved = np.linalg.norm(want - start[name])
            assert np.linalg.norm(got - want) <= 1e-3 * moved, name
    assert all(not np.array_equal(w1[k], start[k]) for k in w1), "two steps moved every weight"


@pytest.mark.slow
def test_checkpoints_cross_zero_stages_and_backends(reference, tiny_model_dir, tmp_path):
    """Two ZeRO-3 ranks write a checkpoint after one step; two ZeRO-2 ranks resume from it:
    the second step matches one torch learner's second step (the format is the torch one)."""
    ref_metrics, ref_weights = reference
    three = _group(tiny_model_dir, 2, "deepspeed", 3)
    _train(three, range(1))
    three.get(three.submit("save_checkpoint", [(str(tmp_path / "c"), 1, {})] * 2))
    three.close()
    two = _group(tiny_model_dir, 2, "deepspeed", 2)
    two.get(two.submit("load_checkpoint", [(str(tmp_path / "c"),)] * 2))
    (metrics,) = _train(two, range(1, 2))
    weights = _weights(two)
    two.close()
    for key in KEYS:
        assert metrics[key] == pytest.approx(ref_metrics[1][key], rel=1e-5, abs=1e-7), key
    for name, want in ref_weights.items():
        np.testing.assert_allclose(weights[name], want, atol=ADAM_ATOL)


def test_deepspeed_skips_a_non_finite_step_and_changes_nothing(reference, tiny_model_dir):
    """A NaN advantage makes NaN gradients: DeepSpeed's overflow check skips every optimizer
    step, so the weights stay bitwise those of the model folder."""
    import ray

    group = _group(tiny_model_dir, 2, "deepspeed", 2)
    advantages = np.full(39, np.nan, dtype=np.float32)
    metrics = group.get(group.submit("step", [(advantages, np.ones(39, dtype=bool),
                                               ray.put(_trajectories(39, seed=0)))] * 2))[0]
    weights = _weights(group)
    group.close()
    assert metrics["learner/skipped_steps"] == 3.0 and metrics["learner/skipped_in_row"] == 3.0
    start = {k: v.detach().numpy() for k, v in _initial(tiny_model_dir).items()}
    for name, value in weights.items():
        np.testing.assert_array_equal(value, start[name])


def test_loop_trains_with_two_learners(tmp_path, warm_model_dir):
    cfg = load_config(["configs/ci.yaml"], [
        f"model.path={warm_model_dir}", f"output_dir={tmp_path}", "ray.address=local",
        "learner.resources.num_workers=2", "ray.num_cpus=3", "learner.checkpoint.every=1"])
    train(cfg)
    with open(tmp_path / "ci" / "metrics.jsonl") as f:
        rows = [json.loads(line) for line in f]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert all(np.isfinite(r["learner/grad_norm"]) for r in rows)
    assert (tmp_path / "ci" / "checkpoints" / "step_000003" / "model.safetensors").is_file()
