"""A model's speed on this machine, in arl's two units: rollout tokens/s and learner step time.

Usage: python bench/model_speed.py MODEL [--threads N] [--batch B]
MODEL is anything `model.path` takes (a directory, a GGUF file, `pkg:<dist>/<file>`).

- generate: the HF engine (bf16) on B tic-tac-toe prompts rendered with the model's own chat
  template (tools inlined where the template ignores them), temperature 1, 48 new tokens at
  most; generated tokens/s, the best of 2 timed calls after a warm-up.
- train: what the learner does for one optimizer step on 8 sequences of (prompt + 48) tokens
  in fp32: a no-grad forward for the old log-probs, forward + backward, AdamW; seconds, the
  best of 2 after a warm-up. Peak RSS of the process is printed too.
The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch

from actors.engines.hf import HFEngine
from arl.episode import ChatRenderer
from arl.types import SamplingParams
from envs.registry import env_config, make_env
from learner.gguf import prepare_model
from learner.model import load_model, token_logprobs

NEW_TOKENS = 48


def generate_rate(path: str, prompts: list[list[int]]) -> float:
    engine = HFEngine(path, dtype="bfloat16")
    engine.generate(prompts, SamplingParams(1.0, 1.0, NEW_TOKENS, seed=99))
    best = 0.0
    for seed in range(2):
        start = time.perf_counter()
        out = engine.generate(prompts, SamplingParams(1.0, 1.0, NEW_TOKENS, seed=seed))
        best = max(best, sum(len(g.token_ids) for g in out) / (time.perf_counter() - start))
    engine.close()
    return best


def train_step_s(path: str, prompt: list[int]) -> float:
    model, _ = load_model(path, "float32")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    ids = torch.tensor([prompt + [prompt[-1]] * NEW_TOKENS] * 8)
    mask = torch.ones_like(ids)
    best = float("inf")
    for i in range(3):
        start = time.perf_counter()
        with torch.no_grad():
            token_logprobs(model, ids, mask)
        loss = -token_logprobs(model, ids, mask).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i > 0:
            best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    path = prepare_model(args.model)
    _, tokenizer = load_model(path, "bfloat16")
    renderer = ChatRenderer(tokenizer, stop_token=tokenizer.eos_token)
    env = make_env(env_config())
    prompts = [renderer.prompt_ids(env.reset(seed)) for seed in range(args.batch)]
    rate = generate_rate(path, prompts)
    print(f"generate: {rate:.0f} tokens/s at batch {args.batch} "
          f"(prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens)")
    step = train_step_s(path, prompts[0])
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"train: {step:.2f} s per optimizer step of 8 x {len(prompts[0]) + NEW_TOKENS} "
          f"tokens (fp32); peak RSS {peak_gib:.1f} GiB")
    print(json.dumps({"model": args.model, "gen_tok_s": round(rate, 1),
                      "train_step_s": round(step, 3), "threads": args.threads,
                      "prompt_tokens": len(prompts[0]), "peak_rss_gib": round(peak_gib, 2)}))


if __name__ == "__main__":
    main()
