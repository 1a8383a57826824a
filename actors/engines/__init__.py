"""Rollout engines behind the RolloutEngine protocol, chosen by `rollout.engine`."""

from __future__ import annotations

from typing import Any

from arl.config import ModelConfig, RolloutConfig
from arl.protocols import RolloutEngine

END_OF_TURN = "<|im_end|>"


def default_stop_ids(tokenizer: Any) -> list[int]:
    """The tokenizer's eos id and the chat end-of-turn token, where they exist."""
    ids = [tokenizer.eos_token_id]
    if END_OF_TURN in tokenizer.get_vocab():
        ids.append(tokenizer.convert_tokens_to_ids(END_OF_TURN))
    return [i for i in ids if i is not None]


def make_engine(model: ModelConfig, rollout: RolloutConfig, seed: int = 0) -> RolloutEngine:
    """The engine `rollout.engine` names, loaded from the local model folder `model.path`.
    vllm is imported only when chosen (ImportError naming the extra when it is missing)."""
    if rollout.engine == "vllm":
        from actors.engines.vllm import VLLMEngine

        v = rollout.vllm
        return VLLMEngine(
            model.path, dtype=model.dtype, max_num_seqs=v.max_num_seqs,
            max_model_len=v.max_model_len, gpu_memory_utilization=v.gpu_memory_utilization,
            enforce_eager=v.enforce_eager, kv_cache_gib=v.kv_cache_gib, seed=seed)
    from actors.engines.hf import HFEngine

    return HFEngine(model.path, dtype=model.dtype)
