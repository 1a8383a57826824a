"""GPU paths (marked `gpu`; CI has no GPU and skips them): the learner on CUDA takes the same
step as on the CPU, and the vLLM engine generates on the GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from tests.builders import learner_cfg

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_learner_step_on_the_gpu_matches_the_cpu(warm_model_dir):
    from arl.learner.gspo_learner import GSPOLearner
    from arl.types import Trajectory

    rng = np.random.default_rng(0)
    trajectories = []
    for i in range(8):
        n = int(rng.integers(20, 40))
        mask = np.zeros(n, dtype=np.int8)
        mask[10:] = 1
        trajectories.append(Trajectory(
            token_ids=rng.integers(7, 300, n).astype(np.int32), loss_mask=mask,
            sampler_logprobs=np.where(mask == 1, -2.0, 0.0).astype(np.float32),
            reward=float(i % 2), group_id=i // 4, policy_version=0, num_turns=1,
            num_tool_calls=1, num_invalid_calls=0, episode_id=i))
    advantages = np.array([1.0, -1.0] * 4, dtype=np.float32)
    cfg = learner_cfg(mini_batches=2, micro_batch_size=4)
    cpu = GSPOLearner(warm_model_dir, cfg, "float32", 10, seed=0)
    gpu = GSPOLearner(warm_model_dir, dataclasses.replace(cfg, gpus=1.0), "float32", 10, seed=0)
    assert next(gpu.model.parameters()).is_cuda
    m_cpu, m_gpu = cpu.step(trajectories, advantages), gpu.step(trajectories, advantages)
    assert abs(m_cpu["learner/loss"] - m_gpu["learner/loss"]) < 1e-4
    w_cpu, w_gpu = cpu.export_weights(), gpu.export_weights()
    for name in w_cpu:
        np.testing.assert_allclose(w_cpu[name], w_gpu[name], atol=1e-5)


@pytest.mark.vllm
def test_vllm_engine_generates_on_the_gpu(warm_model_dir):
    pytest.importorskip("vllm")
    from arl.rollout.engines.vllm import VLLMEngine
    from arl.types import SamplingParams

    engine = VLLMEngine(warm_model_dir, dtype="bfloat16", gpu_memory_utilization=0.2)
    out = engine.generate([[5, 6, 7, 8]] * 4, SamplingParams(1.0, 1.0, 8, seed=0))
    assert all(len(g.token_ids) > 0 for g in out)
    engine.close()
