"""Shared builders for tests: random trajectories and scripted engines, one copy each."""

from __future__ import annotations

import numpy as np

from arl.types import Trajectory


def random_trajectories(pad_id: int, count: int, seed: int, vocab: int = 260,
                        min_len: int = 10, max_len: int = 24) -> tuple[list[Trajectory],
                                                                       np.ndarray]:
    """`count` trajectories of random ids (a prompt with mask 0, then sampled tokens with
    mask 1 and a two-token env gap), groups of 4, episode ids 0.., and random advantages.
    Ids avoid `pad_id` and the 7 special ids of the tiny tokenizer."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(rng.integers(min_len, max_len + 1))
        mask = np.zeros(n, dtype=np.int8)
        mask[n // 3:] = 1
        mask[n // 3 + 2: n // 3 + 4] = 0  # tokens the env appended
        ids = rng.integers(7, vocab, n).astype(np.int32)
        ids[ids == pad_id] = 7
        logprobs = np.where(mask == 1, -rng.uniform(0.1, 6.0, n), 0.0).astype(np.float32)
        out.append(Trajectory(
            token_ids=ids, loss_mask=mask, sampler_logprobs=logprobs, reward=0.0,
            group_id=i // 4, policy_version=0, num_turns=1, num_tool_calls=1,
            num_invalid_calls=0, episode_id=i))
    advantages = np.random.default_rng(seed + 1000).normal(size=count).astype(np.float32)
    return out, advantages
