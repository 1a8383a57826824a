"""GPU check of the vLLM engine (run where a GPU and the `vllm` extra are present; CI never
needs it): loads the tiny warm-start model on the GPU, reloads its weights once through the
engine's one-call update, and prints generated tokens/s at batch 64 and 256.

Usage: python bench/gpu_vllm.py [MODEL_DIR]     (default: cache:tiny-warmstart)
The last line is JSON: tok_s_b64, tok_s_b256, reload_s, greedy_same_after_reload.
Exits 0 with a message where there is no GPU.
"""

from __future__ import annotations

import json
import sys
import time

import torch


def main() -> None:
    if not torch.cuda.is_available():
        print("no CUDA GPU here: nothing to check")
        return
    from arl.envs.registry import env_config, make_env
    from arl.episode import ChatRenderer
    from arl.model.causal_lm import load_model
    from arl.rollout.engines.vllm import VLLMEngine
    from arl.types import SamplingParams

    path = sys.argv[1] if len(sys.argv) > 1 else "cache:tiny-warmstart"
    engine = VLLMEngine(path, dtype="bfloat16", max_num_seqs=256, gpu_memory_utilization=0.3,
                        enforce_eager=False)
    tok = engine.get_tokenizer()
    renderer = ChatRenderer(tok, stop_token=tok.eos_token)
    env = make_env(env_config())
    result: dict[str, float | bool] = {}
    for batch in (64, 256):
        prompts = [renderer.prompt_ids(env.reset(seed)) for seed in range(batch)]
        engine.generate(prompts, SamplingParams(1.0, 1.0, 32, seed=99))  # warm-up
        start = time.perf_counter()
        out = engine.generate(prompts, SamplingParams(1.0, 1.0, 32, seed=0))
        rate = sum(len(g.token_ids) for g in out) / (time.perf_counter() - start)
        result[f"tok_s_b{batch}"] = round(rate)
        print(f"batch {batch}: {rate:.0f} generated tokens/s")
    greedy = SamplingParams(0.0, 1.0, 16, seed=0)
    before = [g.token_ids.tolist() for g in engine.generate(prompts[:32], greedy)]
    model, _ = load_model(path, dtype="float32")
    start = time.perf_counter()
    engine.update_weights({k: v.detach() for k, v in model.state_dict().items()}, version=1)
    result["reload_s"] = round(time.perf_counter() - start, 3)
    after = [g.token_ids.tolist() for g in engine.generate(prompts[:32], greedy)]
    result["greedy_same_after_reload"] = before == after
    engine.close()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
