"""HF rollout engine throughput: generated tokens/s at batch 8, 32 and 64, bf16 vs fp32.

Usage: python bench/engine_throughput.py [MODEL] [THREADS]
       (default cache:tiny-warmstart-board, the demo's warm start; 2 threads, as the demo's
       rollout worker)
Prints one line per setting and, last, a JSON line with the bf16/fp32 ratio at batch 64.
Both dtypes run in this one process on the same prompts, so the ratio is comparable even on
a noisy machine; absolute numbers are not.
"""

from __future__ import annotations

import json
import sys
import time

import torch

from arl.envs.registry import env_config, make_env
from arl.episode import ChatRenderer
from arl.model_source import local_path
from arl.rollout.engines.hf import HFEngine
from arl.types import SamplingParams

MODEL = local_path(sys.argv[1] if len(sys.argv) > 1 else "cache:tiny-warmstart-board")
THREADS = int(sys.argv[2]) if len(sys.argv) > 2 else 2
NEW_TOKENS = 32


def tokens_per_s(engine: HFEngine, prompts: list[list[int]], repeats: int = 3) -> float:
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=NEW_TOKENS, seed=0)
    engine.generate(prompts, params)  # warm-up
    best = 0.0
    for r in range(repeats):
        start = time.perf_counter()
        out = engine.generate(prompts, SamplingParams(1.0, 1.0, NEW_TOKENS, seed=r))
        elapsed = time.perf_counter() - start
        best = max(best, sum(len(g.token_ids) for g in out) / elapsed)
    return best


def main() -> None:
    torch.set_num_threads(THREADS)
    results: dict[tuple[str, int], float] = {}
    for dtype in ("bfloat16", "float32"):
        engine = HFEngine(MODEL, dtype=dtype)
        tok = engine.get_tokenizer()
        renderer = ChatRenderer(tok, stop_token=tok.eos_token)
        env = make_env(env_config())
        for batch in (8, 32, 64):
            prompts = [renderer.prompt_ids(env.reset(seed)) for seed in range(batch)]
            results[dtype, batch] = tokens_per_s(engine, prompts)
            print(f"{dtype:9s} batch {batch:3d}: {results[dtype, batch]:8.0f} tokens/s")
    ratio = results["bfloat16", 64] / results["float32", 64]
    print(json.dumps({"bf16_tok_s": round(results["bfloat16", 64]),
                      "fp32_tok_s": round(results["float32", 64]),
                      "bf16_over_fp32": round(ratio, 2)}))


if __name__ == "__main__":
    main()
