"""arl/learner/gspo_learner.py + arl/learner/optim.py on a real tiny Qwen2 (hidden 64, 2 layers, 2
heads)."""

import math

import numpy as np
import pytest
import torch

from arl.config import LearnerConfig
from arl.learner.collate import collate
from arl.learner.gspo_learner import GSPOLearner
from arl.learner.optim import lr_factor
from arl.model.causal_lm import token_logprobs
from arl.types import Trajectory
from tests.builders import (
    grouped_trajectories,
    learner_cfg,
    random_advantages,
    random_trajectories,
    tiny_learner,
)


@pytest.fixture(scope="session")
def model_dir(tiny_model_dir):
    """The session's random tiny model (tests/conftest.py)."""
    return tiny_model_dir


def _weights(learner):
    return {n: p.detach().clone() for n, p in learner.model.named_parameters()}


def _seq_logprob(learner, traj):
    """Sum of the current policy's log-probs over the trajectory's mask tokens."""
    batch = collate([traj], np.zeros(1), learner.pad_id)
    with torch.no_grad():
        lp = token_logprobs(learner.model, batch.input_ids, batch.attention_mask)
    return float((lp * batch.loss_mask).sum())


def _record_grads(learner):
    """Wrap optimizer.step to keep a copy of the gradients each optimizer step applies."""
    seen, real_step = [], learner.backend.optimizer.step

    def step(*args, **kwargs):
        seen.append({n: p.grad.clone() for n, p in learner.model.named_parameters()})
        return real_step(*args, **kwargs)

    learner.backend.optimizer.step = step
    return seen


def test_micro_batch_size_does_not_change_the_update(model_dir):
    trajs, adv = random_trajectories(8, seed=1), random_advantages(8, seed=1)
    whole = tiny_learner(model_dir, micro_batch_size=4)  # mini-batch size 4: one micro-batch
    split = tiny_learner(model_dir, micro_batch_size=1)
    g_whole, g_split = _record_grads(whole), _record_grads(split)
    m_whole, m_split = whole.step(trajs, adv), split.step(trajs, adv)
    assert m_whole["learner/loss"] == pytest.approx(m_split["learner/loss"], rel=1e-5, abs=1e-7)
    assert m_whole["learner/grad_norm"] == pytest.approx(m_split["learner/grad_norm"], rel=1e-5)
    assert m_whole["perf/train_tokens"] == m_split["perf/train_tokens"]
    assert len(g_whole) == len(g_split) == 2  # both mini-batches, clipped, identical
    for grads_whole, grads_split in zip(g_whole, g_split, strict=True):
        for name, grad in grads_whole.items():
            torch.testing.assert_close(grad, grads_split[name], rtol=1e-5, atol=1e-7)
    # Adam's first update is lr * g / (|g| + eps): for gradients near eps it magnifies
    # rounding, so weights agree to 1% of one lr-sized step rather than to fp32 epsilon.
    w_whole, w_split = _weights(whole), _weights(split)
    for name in w_whole:
        torch.testing.assert_close(w_whole[name], w_split[name], rtol=1e-5, atol=1e-5)


def test_first_mini_batch_is_on_policy(model_dir):
    learner = tiny_learner(model_dir, mini_batches=1, micro_batch_size=3)
    metrics = learner.step(random_trajectories(8, seed=2), random_advantages(8, seed=2))
    assert metrics["gspo/ratio_min"] == 1.0 and metrics["gspo/ratio_max"] == 1.0
    assert metrics["gspo/clip_fraction_low"] == 0.0 and metrics["gspo/clip_fraction_high"] == 0.0
    assert metrics["learner/skipped_steps"] == 0.0 and learner.version == 1


def test_later_mini_batches_are_off_policy_and_clipped(model_dir):
    learner = tiny_learner(model_dir, lr=1e-2, mini_batches=4, micro_batch_size=2)
    metrics = learner.step(random_trajectories(16, seed=3), random_advantages(16, seed=3))
    assert metrics["gspo/ratio_min"] < 1.0 or metrics["gspo/ratio_max"] > 1.0
    assert metrics["gspo/clip_fraction_low"] + metrics["gspo/clip_fraction_high"] > 0.0


def test_sampler_logprob_gap_measures_engine_mismatch(model_dir):
    learner = tiny_learner(model_dir)
    trajs = random_trajectories(4, seed=4)
    batch = collate(trajs, np.zeros(4), learner.pad_id)
    with torch.no_grad():
        own = token_logprobs(learner.model, batch.input_ids, batch.attention_mask)
    shifted = [
        Trajectory(**{**t.__dict__, "sampler_logprobs": np.where(
            t.loss_mask == 1, own[i, : len(t.token_ids)].numpy() + 0.25, 0.0
        ).astype(np.float32)})
        for i, t in enumerate(trajs)
    ]
    metrics = learner.step(shifted, np.zeros(4))
    assert metrics["rollout/sampler_logprob_gap"] == pytest.approx(0.25, abs=1e-5)
    assert metrics["perf/train_tokens"] == sum(len(t.token_ids) for t in trajs)


def test_positive_advantage_gains_probability_negative_loses(model_dir):
    learner = tiny_learner(model_dir, lr=3e-3, mini_batches=1, micro_batch_size=2)
    good, bad = random_trajectories(2, seed=5)
    before = _seq_logprob(learner, good), _seq_logprob(learner, bad)
    for _ in range(5):
        learner.step([good, bad], np.array([1.0, -1.0]))
    after = _seq_logprob(learner, good), _seq_logprob(learner, bad)
    assert after[0] > before[0] + 1.0
    assert after[1] < before[1] - 1.0


def test_nan_advantage_skips_the_step_and_leaves_weights(model_dir):
    learner = tiny_learner(model_dir, mini_batches=1)
    before = _weights(learner)
    adv = random_advantages(8, seed=6)
    adv[3] = np.nan
    metrics = learner.step(random_trajectories(8, seed=6), adv)
    assert metrics["learner/skipped_steps"] == 1.0 and learner.counters["skipped_steps"] == 1
    assert math.isnan(metrics["learner/loss"])  # no applied optimizer step to average
    assert learner.backend.optimizer.state_dict()["state"] == {}  # AdamW never saw the NaN
    for name, value in _weights(learner).items():
        assert torch.equal(value, before[name])
    assert learner.version == 1  # the batch was consumed all the same
    assert metrics["learner/skipped_in_row"] == 1.0
    metrics = learner.step(random_trajectories(8, seed=7), random_advantages(8, seed=7))
    assert metrics["learner/skipped_in_row"] == 0.0 and learner.counters["skipped_steps"] == 1


def test_hooked_non_finite_loss_skips_only_that_optimizer_step(model_dir):
    learner = tiny_learner(model_dir, mini_batches=2, micro_batch_size=4)
    real_loss, calls = learner.loss_fn, []

    def first_call_is_inf(*args):
        out = real_loss(*args)
        calls.append(1)
        return out._replace(loss=out.loss * math.inf) if len(calls) == 1 else out

    learner.loss_fn = first_call_is_inf
    metrics = learner.step(random_trajectories(8, seed=7), random_advantages(8, seed=7))
    assert len(calls) == 2 and metrics["learner/skipped_steps"] == 1.0
    assert math.isfinite(metrics["learner/loss"])
    steps = {float(s["step"]) for s in learner.backend.optimizer.state_dict()["state"].values()}
    assert steps == {1.0}  # one AdamW step applied, not two


def test_same_seed_same_metrics_and_weights(model_dir):
    runs = []
    for _ in range(2):
        learner = tiny_learner(model_dir, seed=11, mini_batches=4, micro_batch_size=3)
        metrics = [learner.step(random_trajectories(12, seed=s), random_advantages(12, seed=s))
                   for s in (8, 9)]
        runs.append((metrics, _weights(learner)))
    assert runs[0][0] == runs[1][0]
    for name, value in runs[0][1].items():
        assert torch.equal(value, runs[1][1][name])


def test_lr_schedule_counts_learner_steps(model_dir):
    learner = tiny_learner(model_dir, lr=1e-3, warmup_steps=2, lr_schedule="cosine", total_steps=4)
    lrs = [learner.step(random_trajectories(4, seed=s), random_advantages(4, seed=s))["learner/lr"]
           for s in range(4)]
    assert lrs == pytest.approx([5e-4, 1e-3, 1e-3, 5e-4])  # 2 mini-batches each: still one lr step
    assert lr_factor(4, 2, 4, "cosine") == 0.0 and lr_factor(9, 2, 4, "cosine") == 0.0
    assert lr_factor(0, 0, 4, "constant") == 1.0 and lr_factor(100, 3, 4, "constant") == 1.0
    with pytest.raises(ValueError, match="lr_schedule"):
        lr_factor(0, 0, 4, "linear")


def test_export_weights_are_fp32_copies_under_hf_names(model_dir):
    learner = tiny_learner(model_dir)
    exported = learner.export_weights()
    assert set(exported) == set(learner.model.state_dict())
    assert all(a.dtype == np.float32 and a.flags["C_CONTIGUOUS"] for a in exported.values())
    if learner.model.config.tie_word_embeddings:
        assert exported["lm_head.weight"] is exported["model.embed_tokens.weight"]
    snapshot = {n: a.copy() for n, a in exported.items()}
    learner.step(random_trajectories(8, seed=10), random_advantages(8, seed=10))
    for name, array in exported.items():
        np.testing.assert_array_equal(array, snapshot[name])  # not views of live parameters
    fresh = learner.export_weights()["model.norm.weight"]
    assert not np.array_equal(fresh, snapshot["model.norm.weight"])


def test_bad_arguments_are_refused(model_dir):
    with pytest.raises(ValueError, match="dtype"):
        GSPOLearner(model_dir, LearnerConfig(), "float16", total_steps=1, seed=0)
    with pytest.raises(ValueError, match="loss"):
        GSPOLearner(model_dir, learner_cfg(loss="ppo"), "float32", total_steps=1, seed=0)


def test_token_entropy_is_the_entropy_of_each_sampled_token_distribution(model_dir):
    learner = tiny_learner(model_dir)
    batch = collate(random_trajectories(3, seed=4), np.zeros(3), learner.pad_id)
    with torch.no_grad():
        logprobs, entropy = token_logprobs(learner.model, batch.input_ids, batch.attention_mask,
                                           temperature=0.7, with_entropy=True)
        plain = token_logprobs(learner.model, batch.input_ids, batch.attention_mask, 0.7)
        logits = learner.model(input_ids=batch.input_ids,
                               attention_mask=batch.attention_mask).logits.float() / 0.7
    assert torch.equal(logprobs, plain)  # asking for the entropy changes no log-prob
    logp = torch.log_softmax(logits, dim=-1)
    expected = -(logp.exp() * logp).sum(-1)[:, :-1]  # position t predicts token t + 1
    real = (batch.attention_mask[:, 1:] * batch.attention_mask[:, :-1]).bool()
    torch.testing.assert_close(entropy[:, 1:][real], expected[real], rtol=1e-5, atol=1e-5)
    assert (entropy[:, 0] == 0).all() and (entropy[:, 1:][~real] == 0).all()


def test_the_entropy_bonus_raises_the_entropy(model_dir):
    trajectories = random_trajectories(8, seed=12)
    zero = np.zeros(8, dtype=np.float32)  # no advantage: only the bonus moves the policy
    after = {}
    for coef in (0.0, 0.5):
        learner = tiny_learner(model_dir, lr=3e-3, entropy_coef=coef)
        first = learner.step(trajectories, zero)["learner/entropy"]
        for _ in range(3):
            learner.step(trajectories, zero)
        after[coef] = learner.step(trajectories, zero)["learner/entropy"]
    assert after[0.0] == pytest.approx(first, rel=1e-6)  # nothing to learn, nothing moves
    assert after[0.5] > first + 1e-3


def test_the_bonus_over_decision_tokens_is_the_top_tokens_mean(model_dir):
    """learner.loss.entropy_tokens = 1: with no advantage the loss is -coef x the mean over rows of
    each row's largest token entropy, which no row's mean entropy exceeds."""
    trajectories = random_trajectories(8, seed=12)
    zero = np.zeros(8, dtype=np.float32)
    loss = {}
    for k in (0, 1):
        learner = tiny_learner(model_dir, lr=0.0, mini_batches=1, entropy_coef=1.0,
                               entropy_tokens=k)
        loss[k] = learner.step(trajectories, zero)["learner/loss"]
    assert loss[1] < loss[0] < 0.0


def _update(learner):
    before = _weights(learner)
    metrics = learner.step(random_trajectories(16, seed=7), random_advantages(16, seed=7))
    after = _weights(learner)
    delta = torch.cat([(after[n] - before[n]).flatten() for n in before])
    return metrics, delta


def test_bf16_compute_step_agrees_with_fp32(model_dir):
    """learner.compute.dtype=bfloat16 (fp32 weights, fp32 head and log-ratios) against float32 on
    the
    same batch: loss within 2 % (+1e-4), grad norm within 0.5 %, the same number of optimizer
    steps, and weight updates pointing the same way (cosine > 0.99), each within 5 % in size.
    The weights stay fp32."""
    fp32 = tiny_learner(model_dir, mini_batches=1, micro_batch_size=16, dtype="float32")
    bf16 = tiny_learner(model_dir, mini_batches=1, micro_batch_size=16, dtype="bfloat16")
    assert bf16.compute_dtype == "bfloat16"
    m32, d32 = _update(fp32)
    m16, d16 = _update(bf16)
    assert m16["learner/loss"] == pytest.approx(m32["learner/loss"], rel=0.02, abs=1e-4)
    assert m16["learner/grad_norm"] == pytest.approx(m32["learner/grad_norm"], rel=0.005)
    assert m16["learner/skipped_steps"] == m32["learner/skipped_steps"] == 0.0
    cosine = float(torch.nn.functional.cosine_similarity(d16, d32, dim=0))
    assert cosine > 0.99
    assert float(d16.norm()) == pytest.approx(float(d32.norm()), rel=0.05)
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())


def test_bf16_compute_keeps_the_first_ratio_exact_and_logs_the_gap(model_dir):
    """Old and new log-probs come from one computation: ratios of the first mini-batch are 1
    bit for bit in bf16 too, and the sampler/learner gap is reported."""
    learner = tiny_learner(model_dir, mini_batches=1, micro_batch_size=3, dtype="bfloat16")
    metrics = learner.step(random_trajectories(8, seed=2), random_advantages(8, seed=2))
    assert metrics["gspo/ratio_min"] == 1.0 and metrics["gspo/ratio_max"] == 1.0
    assert math.isfinite(metrics["rollout/sampler_logprob_gap"])
    assert metrics["rollout/sampler_logprob_gap"] > 0.0  # the fixtures' sampler log-probs


def test_the_first_mini_batch_needs_no_pass_of_its_own_for_old_logprobs(model_dir):
    """Mini-batch 1 trains on the weights its old log-probs are defined by: its own forward
    pass gives them. With 4 mini-batches of one micro-batch each, a step makes 3 no-grad
    passes (old log-probs of mini-batches 2-4) and 4 training passes, and the first
    mini-batch's ratios are exactly 1."""
    learner = tiny_learner(model_dir, mini_batches=4, micro_batch_size=4)
    passes = {"grad": 0, "no_grad": 0}

    def count(module, args, kwargs):
        passes["grad" if torch.is_grad_enabled() else "no_grad"] += 1

    learner.model.register_forward_pre_hook(count, with_kwargs=True)
    ratios = []
    real_loss = learner.loss_fn

    def loss_fn(*args):
        out = real_loss(*args)
        ratios.append(out.ratio)
        return out

    learner.loss_fn = loss_fn
    metrics = learner.step(random_trajectories(16, seed=6), random_advantages(16, seed=6))
    assert passes == {"grad": 4, "no_grad": 3}
    assert torch.equal(ratios[0], torch.ones_like(ratios[0]))
    assert math.isfinite(metrics["learner/entropy"]) and metrics["learner/entropy"] > 0.0
    assert math.isfinite(metrics["rollout/sampler_logprob_gap"])


def test_sampler_old_logprobs_anchor_later_mini_batches_without_a_pass(model_dir):
    """learner.loss.old_logprobs=sampler: mini-batches 2-4 take the engine's log-probs as their
    old log-probs, so the step makes no no-grad pass; the first keeps its own (ratios exactly
    1), and the gap and entropy metrics come from it alone."""
    learner = tiny_learner(model_dir, mini_batches=4, micro_batch_size=4,
                           old_logprobs="sampler")
    passes = {"grad": 0, "no_grad": 0}
    learner.model.register_forward_pre_hook(
        lambda module, args, kwargs: passes.__setitem__(
            "grad" if torch.is_grad_enabled() else "no_grad",
            passes["grad" if torch.is_grad_enabled() else "no_grad"] + 1), with_kwargs=True)
    seen, real_loss = [], learner.loss_fn

    def loss_fn(logprobs, old, advantages, mask, *args):
        seen.append((old.clone(), mask.clone()))
        return real_loss(logprobs, old, advantages, mask, *args)

    learner.loss_fn = loss_fn
    trajs = [Trajectory(**{**t.__dict__, "sampler_logprobs": np.where(
        t.loss_mask == 1, -0.75, 0.0).astype(np.float32)})
        for t in random_trajectories(16, seed=6)]
    metrics = learner.step(trajs, random_advantages(16, seed=6))
    assert passes == {"grad": 4, "no_grad": 0}
    first_old, first_mask = seen[0]
    assert not torch.all(first_old[first_mask.bool()] == -0.75)  # its own pass, not the engine's
    for old, mask in seen[1:]:
        assert torch.all(old[mask.bool()] == -0.75)
    assert math.isfinite(metrics["learner/entropy"]) and metrics["learner/entropy"] > 0.0
    assert metrics["rollout/sampler_logprob_gap"] > 0.0


def test_a_prompt_shared_by_a_group_runs_once_and_changes_nothing(model_dir):
    """learner.compute.share_prefix: the same step with and without it gives the same loss, grad
    norm
    and weights (up to rounding), while the forward passes see far fewer prompt tokens."""
    trajs, adv = grouped_trajectories(4, 4, seed=7), random_advantages(16, seed=7)
    tokens = {}
    results = {}
    for share in (False, True):
        learner = tiny_learner(model_dir, share_prefix=share, mini_batches=1,
                               micro_batch_size=16)
        tokens[share] = 0

        def count(module, args, kwargs, share=share):
            tokens[share] += kwargs["input_ids"].numel()

        learner.model.register_forward_pre_hook(count, with_kwargs=True)
        results[share] = learner.step(trajs, adv), _weights(learner)
    (plain, w_plain), (shared, w_shared) = results[False], results[True]
    assert shared["learner/loss"] == pytest.approx(plain["learner/loss"], rel=1e-5, abs=1e-7)
    assert shared["learner/grad_norm"] == pytest.approx(plain["learner/grad_norm"], rel=1e-5)
    assert shared["learner/entropy"] == pytest.approx(plain["learner/entropy"], rel=1e-5)
    for name in w_plain:
        torch.testing.assert_close(w_shared[name], w_plain[name], rtol=1e-5, atol=1e-5)
    assert tokens[True] < 0.5 * tokens[False]


def test_negative_odds_cap_weights_what_the_loss_sees(model_dir, monkeypatch):
    """learner.loss.negative_odds_cap reaches every micro-batch's loss: the advantages the loss
    gets are gspo.negative_odds_weighted's, given the step's old log-probs, the mask and the
    cap. With the weighting stood in by x3 on negative advantages, a step at lr 0 (ratio 1,
    loss -mean A) reports three times the loss of all-negative advantages."""
    from arl import gspo

    seen = []

    def tripled(advantages, old_logprobs, loss_mask, cap):
        seen.append((old_logprobs.shape == loss_mask.shape, cap))
        return torch.where(advantages < 0, advantages * 3.0, advantages)

    monkeypatch.setattr(gspo, "negative_odds_weighted", tripled)
    trajectories = random_trajectories(8, seed=5)
    negative = -np.abs(random_advantages(8, seed=5)) - 0.1
    loss = {}
    for cap in (0.0, 7.0):
        learner = tiny_learner(model_dir, lr=0.0, mini_batches=2, negative_odds_cap=cap)
        loss[cap] = learner.step(trajectories, negative)["learner/loss"]
    assert seen and all(same and cap == 7.0 for same, cap in seen)
    assert loss[7.0] == pytest.approx(3.0 * loss[0.0], rel=1e-5)
    assert loss[0.0] > 0.0
