"""LoRA: only adapters train, AdamW holds state for them alone, and what a rollout engine
loads after a sync is the merged model (checked against peft's own merge)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from arl.config import LearnerConfig, LoraConfig
from arl.learner.gspo_learner import GSPOLearner
from arl.types import SamplingParams
from tests.builders import random_trajectories, tiny_learner

peft = pytest.importorskip("peft", reason="LoRA needs the lora extra (peft)")


def _learner(model_dir, rank=4):
    return tiny_learner(model_dir, lr=1e-2, lora=LoraConfig(rank=rank, alpha=8.0))


def test_only_adapters_train_and_the_optimizer_shrinks(tiny_model_dir):
    learner = _learner(tiny_model_dir)
    before = {n: p.detach().clone() for n, p in learner.model.named_parameters()}
    trainable = {n for n, p in learner.model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in n for n in trainable)
    learner.step(random_trajectories(8, 0), np.linspace(-1, 1, 8).astype(np.float32))
    changed = {n for n, p in learner.model.named_parameters() if not torch.equal(p, before[n])}
    assert changed and changed <= trainable  # base weights bitwise unchanged
    state = learner.backend.optimizer.state_dict()["state"]
    adapter_numel = sum(p.numel() for p in learner.model.parameters() if p.requires_grad)
    total_numel = sum(p.numel() for p in learner.model.parameters())
    moments = sum(s["exp_avg"].numel() + s["exp_avg_sq"].numel() for s in state.values())
    assert moments == 2 * adapter_numel and adapter_numel < total_numel / 10


def test_engine_after_sync_matches_the_merged_model(tiny_model_dir):
    from arl.model.causal_lm import load_model, token_logprobs
    from arl.rollout.engines.hf import HFEngine

    learner = _learner(tiny_model_dir)
    for seed in range(2):
        learner.step(random_trajectories(8, seed), np.linspace(-1, 1, 8).astype(np.float32))
    weights = learner.export_weights()
    base, _ = load_model(tiny_model_dir, "float32")
    assert set(weights) == set(base.state_dict())  # plain HF names, no adapter in sight
    engine = HFEngine(tiny_model_dir, dtype="float32")
    engine.update_weights(weights, version=2)
    merged = copy.deepcopy(learner.model).merge_and_unload()  # peft's own merge
    ids = torch.tensor([[5, 17, 40, 33, 90, 12, 7, 61]])
    mask = torch.ones_like(ids)
    ours = token_logprobs(engine.model, ids, mask)
    theirs = token_logprobs(merged.eval(), ids, mask)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
    with torch.no_grad():  # and the adapters did move the policy away from the base model
        assert not torch.allclose(ours, token_logprobs(base.eval(), ids, mask), atol=1e-4)
    prompts = [[5, 17, 40, 33], [90, 12, 7, 61, 8]]
    params = SamplingParams(0.0, 1.0, 6, 0)
    greedy = [g.token_ids.tolist() for g in engine.generate(prompts, params)]
    merged_engine = HFEngine(tiny_model_dir, dtype="float32")
    merged_engine.update_weights({k: v.detach() for k, v in merged.state_dict().items()}, 2)
    assert greedy == [g.token_ids.tolist() for g in merged_engine.generate(prompts, params)]


def test_a_lora_checkpoint_round_trips(tiny_model_dir, tmp_path):
    from arl.model.checkpoint.store import load_checkpoint, model_folder_files, save_checkpoint
    from arl.rollout.evaluation import load_policy

    learner = _learner(tiny_model_dir)
    learner.step(random_trajectories(8, 0), np.linspace(-1, 1, 8).astype(np.float32))
    lora = {"rank": 4, "alpha": 8.0, "target_modules": list(LoraConfig().target_modules)}
    config = {"model": {"path": tiny_model_dir}, "learner": {"lora": lora}}
    save_checkpoint(tmp_path / "c", learner.state_dict_for_checkpoint(), 1, {"config": config},
                    model_files=model_folder_files(tiny_model_dir))
    # `arl eval` loads a LoRA checkpoint as the merged model a sync would give an engine.
    engine = load_policy(str(tmp_path / "c"), dtype="float32")
    exported = learner.export_weights()
    for name, value in engine.model.state_dict().items():
        np.testing.assert_allclose(value.numpy(), exported[name], rtol=0, atol=1e-6)
    again = _learner(tiny_model_dir)
    again.load_checkpoint_state(load_checkpoint(tmp_path / "c").state)
    trajectories, adv = random_trajectories(8, 1), np.linspace(1, -1, 8).astype(np.float32)
    assert learner.step(trajectories, adv) == again.step(trajectories, adv)


def test_unknown_target_modules_are_refused(tiny_model_dir):
    with pytest.raises(ValueError, match="not modules of the model"):
        GSPOLearner(tiny_model_dir, LearnerConfig(lora=LoraConfig(rank=2, target_modules=[
            "query_key_value"])), "float32", total_steps=1, seed=0)
