"""The rollout engine `rollout.engine` names."""

from __future__ import annotations

from arl.config import ModelConfig, RolloutConfig
from arl.protocols import RolloutEngine


def make_engine(model: ModelConfig, rollout: RolloutConfig, seed: int = 0) -> RolloutEngine:
    """The engine `rollout.engine` names, loaded from the local model folder `model.path`.
    vllm is imported only when chosen (ImportError naming the extra when it is missing)."""
    if rollout.engine == "vllm":
        from arl.rollout.engines.vllm import VLLMEngine

        v = rollout.vllm
        return VLLMEngine(
            model.path, dtype=model.dtype, max_num_seqs=v.max_num_seqs,
            max_model_len=v.max_model_len, gpu_memory_utilization=v.gpu_memory_utilization,
            enforce_eager=v.enforce_eager, kv_cache_gib=v.kv_cache_gib,
            gpu_kv_cache_bytes=int(v.gpu_kv_cache_gib * 2**30), seed=seed)
    from arl.rollout.engines.hf import HFEngine

    return HFEngine(model.path, dtype=model.dtype)
