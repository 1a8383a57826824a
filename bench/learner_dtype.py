"""The learner's compute dtype (`learner.compute.dtype`) on this machine: its speed, and what bf16
rounding does to GSPO's sequence ratio, measured in one run.

Usage: python bench/learner_dtype.py MODEL [--threads N] [--batch B] [--lr LR]
MODEL is anything `model.path` takes (a directory, `cache:<name>`, a GGUF file,
`pkg:<dist>/<file>`).

1. B tic-tac-toe prompts, rendered with the model's chat template, are answered by the HF
   engine in bf16 at temperature 1: real replies, and the sampler's own log-probs.
2. The learner's per-token log-probs of those replies are computed at weights W in three
   ways: float32; bfloat16 with the fp32 output head (what `learner.compute.dtype: bfloat16` does);
   and plain bf16 autocast, head included (for comparison).
3. One AdamW step of size `--lr` on a GSPO-like loss (random +-1 advantages) gives W'; the
   log-probs are computed again, and each sequence's log-ratio s = mean over its reply tokens
   of (log p_W' - log p_W) is formed in each mode.
4. Reported per mode: the sampler/learner gap (mean |sampler - learner| log-prob over reply
   tokens, the `rollout/sampler_logprob_gap` metric), the rms of s itself (the signal), the
   rms of s_mode - s_fp32 (the noise), that noise over GSPO's clip epsilon (the paper's 3e-4
   and the demo's 0.01), the share of sequences whose clip decision differs from fp32's, and
   the time of one learner pass (no-grad forward for the old log-probs, forward + backward,
   AdamW) over the batch, best of 2 after a warm-up.
The last line is JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import torch

from arl.envs.registry import env_config, make_env
from arl.episode import ChatRenderer
from arl.model.causal_lm import compute_in, load_model, token_logprobs
from arl.model.source import local_folder
from arl.rollout.engines.hf import HFEngine
from arl.types import SamplingParams

NEW_TOKENS = 32
CLIPS = {"paper": 3e-4, "demo": 0.01}


def mode_context(model, mode: str):
    if mode == "bf16_head":  # plain autocast: the head's logits in bf16 too
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return compute_in(model, "bfloat16" if mode == "bf16" else "float32") if mode != "fp32" \
        else contextlib.nullcontext()


def rollouts(path: str, batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids [B, T], attention mask [B, T], reply mask [B, T]) and the sampler's log-probs."""
    _, tokenizer = load_model(path, "bfloat16")
    renderer = ChatRenderer(tokenizer, stop_token=tokenizer.eos_token)
    env = make_env(env_config())
    prompts = [renderer.prompt_ids(env.reset(seed)) for seed in range(batch)]
    engine = HFEngine(path, dtype="bfloat16")
    out = engine.generate(prompts, SamplingParams(1.0, 1.0, NEW_TOKENS, seed=0))
    engine.close()
    length = max(len(p) + len(g.token_ids) for p, g in zip(prompts, out, strict=True))
    ids = torch.full((batch, length), int(tokenizer.pad_token_id or 0))
    attn, reply, sampler = (torch.zeros(batch, length) for _ in range(3))
    for i, (p, g) in enumerate(zip(prompts, out, strict=True)):
        seq = p + list(g.token_ids)
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        reply[i, len(p) : len(seq)] = 1
        sampler[i, len(p) : len(seq)] = torch.as_tensor(g.sampler_logprobs, dtype=torch.float32)
    return ids, attn.long(), reply, sampler


def logprobs_all(model, ids, attn) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        out = {}
        for mode in ("fp32", "bf16", "bf16_head"):
            with mode_context(model, mode):
                out[mode] = token_logprobs(model, ids, attn)
        return out


def seq_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [B]


def pass_seconds(model, ids, attn, mode: str, lr: float) -> float:
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    best = float("inf")
    for i in range(3):
        start = time.perf_counter()
        with torch.no_grad(), mode_context(model, mode):
            token_logprobs(model, ids, attn)
        with mode_context(model, mode):
            loss = -token_logprobs(model, ids, attn).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i > 0:
            best = min(best, time.perf_counter() - start)
    return best


def measure(path: str, batch: int, lr: float) -> dict[str, dict[str, float]]:
    ids, attn, reply, sampler = rollouts(path, batch)
    model, _ = load_model(path, "float32")
    model.train()
    old = logprobs_all(model, ids, attn)
    adv = torch.where(torch.arange(batch) % 2 == 0, 1.0, -1.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    (-(adv * seq_mean(token_logprobs(model, ids, attn), reply)).mean()).backward()
    optimizer.step()
    new = logprobs_all(model, ids, attn)
    tokens = reply.sum()
    s = {m: seq_mean(new[m] - old[m], reply) for m in old}
    report = {}
    for mode in old:
        noise = s[mode] - s["fp32"]
        row = {"sampler_gap": float(((sampler - old[mode]).abs() * reply).sum() / tokens),
               "ratio_signal_rms": float(s[mode].pow(2).mean().sqrt()),
               "ratio_noise_rms": float(noise.pow(2).mean().sqrt())}
        for name, eps in CLIPS.items():
            row[f"noise_over_clip_{name}"] = row["ratio_noise_rms"] / eps
            clipped = (s[mode].abs() > eps)
            row[f"clip_disagree_{name}"] = float((clipped != (s["fp32"].abs() > eps)).float()
                                                 .mean())
        row["pass_s"] = pass_seconds(model, ids, attn, mode, lr)
        report[mode] = row
    return report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1.5e-4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    report = measure(local_folder(args.model), args.batch, args.lr)
    print(f"{'mode':>10} {'gap':>8} {'signal':>9} {'noise':>9} {'n/3e-4':>7} {'n/0.01':>7} "
          f"{'dis3e-4':>7} {'dis.01':>7} {'pass s':>7}")
    for mode, r in report.items():
        print(f"{mode:>10} {r['sampler_gap']:8.5f} {r['ratio_signal_rms']:9.2e} "
              f"{r['ratio_noise_rms']:9.2e} {r['noise_over_clip_paper']:7.3f} "
              f"{r['noise_over_clip_demo']:7.4f} {r['clip_disagree_paper']:7.3f} "
              f"{r['clip_disagree_demo']:7.3f} {r['pass_s']:7.3f}")
    speedup = report["fp32"]["pass_s"] / report["bf16"]["pass_s"]
    print(f"bf16 learner pass {speedup:.2f}x faster than fp32")
    print(json.dumps({"model": args.model, "batch": args.batch, "lr": args.lr,
                      "threads": args.threads, "bf16_speedup": round(speedup, 3),
                      "modes": report}))


if __name__ == "__main__":
    main()
