"""The KL penalty to the reference policy (`learner.loss.kl_coef`, arl/learner/reference.py) on a
real tiny Qwen2: it starts at exactly 0, and it holds the trained policy nearer the model the run
started from than the same updates without it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from arl.learner.collate import collate
from arl.model.causal_lm import load_model, token_logprobs
from arl.schema_learner import LoraConfig
from tests.builders import random_trajectories, tiny_learner


def _loss(**kl) -> dict:
    return {"clip_low": 0.2, "clip_high": 0.2, **kl}


def _drift(learner, model_dir, trajectories) -> float:
    """Mean |log pi - log pi_start| over the trajectories' mask tokens."""
    start, _ = load_model(model_dir, "float32")
    batch = collate(trajectories, np.zeros(len(trajectories)), learner.pad_id)
    with torch.no_grad():
        now = token_logprobs(learner.model, batch.input_ids, batch.attention_mask)
        ref = token_logprobs(start, batch.input_ids, batch.attention_mask)
    return float(((now - ref).abs() * batch.loss_mask).sum() / batch.loss_mask.sum())


def test_the_penalty_starts_at_zero_and_holds_the_policy_near_the_reference(tiny_model_dir):
    trajectories = random_trajectories(8, seed=3)
    advantages = np.linspace(-1.0, 1.0, 8).astype(np.float32)
    drift, kl = {}, {}
    for coef in (0.0, 2.0):
        learner = tiny_learner(tiny_model_dir, lr=3e-3, **_loss(kl_coef=coef))
        first = learner.step(trajectories, advantages)
        for _ in range(5):
            last = learner.step(trajectories, advantages)
        drift[coef] = _drift(learner, tiny_model_dir, trajectories)
        if coef > 0:
            assert first["learner/kl_ref"] == 0.0  # the policy is the reference, bit for bit
            kl[coef] = last["learner/kl_ref"]
        else:
            assert "learner/kl_ref" not in first
    assert drift[0.0] > 0.05  # the advantages alone move the policy
    assert drift[2.0] < 0.8 * drift[0.0]
    assert kl[2.0] > 0.0


def test_without_an_advantage_the_penalty_changes_nothing_at_the_reference(tiny_model_dir):
    trajectories = random_trajectories(8, seed=4)
    learner = tiny_learner(tiny_model_dir, lr=3e-3, **_loss(kl_coef=1.0))
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    metrics = learner.step(trajectories, np.zeros(8, dtype=np.float32))
    assert metrics["learner/loss"] == 0.0 and metrics["learner/grad_norm"] == 0.0
    assert all(torch.equal(p, before[n]) for n, p in learner.model.named_parameters())


@pytest.mark.parametrize("estimator", ["k1", "k2"])
def test_every_estimator_trains(tiny_model_dir, estimator):
    learner = tiny_learner(tiny_model_dir, lr=3e-3,
                           **_loss(kl_coef=1.0, kl_estimator=estimator))
    trajectories = random_trajectories(8, seed=5)
    advantages = np.linspace(-1.0, 1.0, 8).astype(np.float32)
    learner.step(trajectories, advantages)
    metrics = learner.step(trajectories, advantages)
    assert np.isfinite(metrics["learner/loss"]) and metrics["learner/kl_ref"] != 0.0


def test_with_lora_the_reference_is_the_model_with_its_adapters_off(tiny_model_dir):
    pytest.importorskip("peft", reason="LoRA needs the lora extra (peft)")
    learner = tiny_learner(tiny_model_dir, lr=1e-2, **_loss(kl_coef=1.0),
                           lora=LoraConfig(rank=4, alpha=8.0))
    assert learner.reference.lora  # no frozen copy
    trajectories = random_trajectories(8, seed=6)
    advantages = np.linspace(-1.0, 1.0, 8).astype(np.float32)
    assert learner.step(trajectories, advantages)["learner/kl_ref"] == 0.0
    learner.step(trajectories, advantages)
    batch = collate(trajectories, advantages, learner.pad_id)
    ref = learner.reference.logprobs(batch, 1.0, passes=0)
    start, _ = load_model(tiny_model_dir, "float32")
    with torch.no_grad():
        expected = token_logprobs(start, batch.input_ids, batch.attention_mask)
        trained = token_logprobs(learner.model, batch.input_ids, batch.attention_mask)
    mask = batch.loss_mask.bool()
    torch.testing.assert_close(ref[mask], expected[mask], rtol=1e-5, atol=1e-5)
    assert (trained[mask] - expected[mask]).abs().max() > 1e-3  # the adapters did train


def test_deepspeed_takes_the_same_penalised_steps_as_torch(tiny_model_dir):
    pytest.importorskip("deepspeed")
    trajectories = random_trajectories(8, seed=7)
    advantages = np.linspace(-1.0, 1.0, 8).astype(np.float32)
    runs = {}
    for backend in ("torch", "deepspeed"):
        learner = tiny_learner(tiny_model_dir, lr=3e-3, backend=backend, zero_stage=2,
                               **_loss(kl_coef=0.5))
        runs[backend] = [learner.step(trajectories, advantages) for _ in range(3)]
    for ours, theirs in zip(runs["torch"], runs["deepspeed"], strict=True):
        for key in ("learner/loss", "learner/grad_norm", "learner/kl_ref"):
            assert theirs[key] == pytest.approx(ours[key], rel=1e-4, abs=1e-6), key
    assert runs["torch"][-1]["learner/kl_ref"] > 0.0
