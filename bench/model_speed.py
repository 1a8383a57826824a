"""A model's speed in the training loop against bare transformers and torch on the same work,
in bf16 and in fp32, measured in one run.

Usage: python bench/model_speed.py [CONFIG] [--steps N] [--dtypes bfloat16,float32]
       (default configs/tictactoe_move_smollm2.yaml, 6 steps; its model must exist:
       `arl warmstart configs/warmstart_smollm2.yaml` first)

For each dtype (the rollout engine's `model.dtype` and the learner's `learner.compute.dtype` both):
  in-loop   N sync steps of CONFIG on an embedded Ray cluster; the first 2 are left out.
            generation: `perf/rollout_tokens_per_s` (sampled tokens over the whole collect:
            engine, episode loop, env, Ray); learner: `perf/train_tokens_per_s` (non-pad
            tokens of the batch over the whole learner step, optimizer included)
  bare      in this process, with the same thread counts, on the same start states:
            generation: transformers' own `model.generate` (sampling, the config's
            temperature and max_new_tokens) on the steps' prompts, G copies each, left-padded
            in one batch per step: generated tokens (to the stop token) per second;
            learner: plain torch on those prompts + completions: per micro-batch a forward
            over every position, fp32 log-softmax, a loss on the completions, backward, and
            one AdamW step per mini-batch (bf16 autocast with fp32 weights, or fp32)
and prints in-loop / bare for both. The learner's ratio can exceed 1: the loop's learner
runs the output head on completion positions only and a prompt the G samples share once
(arl/model/causal_lm.py), which the bare pass does not. The last line is JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import resource
import statistics
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

from arl.app.train import train
from arl.config import Config, load_config
from arl.envs.registry import make_env
from arl.episode import ChatRenderer
from arl.learner.collate import right_pad
from arl.model.causal_lm import load_model, set_torch_threads, torch_dtype
from arl.model.source import local_folder
from arl.model_source import local_path
from arl.rollout.engines.hf import left_pad
from arl.steps import start_states

WARMUP = 2


def in_loop(config: str, dtype: str, steps: int) -> tuple[Config, dict[str, float]]:
    """(the run's resolved config, median in-loop tokens/s of generation and learner)."""
    with tempfile.TemporaryDirectory() as out:
        cfg = load_config([config], [f"steps={steps}", f"output_dir={out}",
                                     "wandb.mode=disabled", "ray.address=local",
                                     "learner.checkpoint.every=0", f"model.dtype={dtype}",
                                     f"learner.compute.dtype={dtype}"])
        cfg = dataclasses.replace(cfg, model=dataclasses.replace(
            cfg.model, path=local_folder(local_path(cfg.model.path))))
        train(cfg)
        with open(f"{out}/{cfg.run_name}/metrics.jsonl", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f][WARMUP:]
    return cfg, {"gen": statistics.median(r["perf/rollout_tokens_per_s"] for r in rows),
                 "learner": statistics.median(r["perf/train_tokens_per_s"] for r in rows)}


def step_prompts(cfg: Config, step: int, renderer: ChatRenderer) -> list[list[int]]:
    states = start_states(cfg, step)
    # each episode's own env, as the rollout worker makes it (a group's variants may differ)
    return [renderer.prompt_ids(make_env(cfg.env, variant=i).reset(seed))
            for seed in states.env_seeds for i in range(cfg.rollout.group_size)]


def bare_generate(cfg: Config, dtype: str, steps: range
                  ) -> tuple[float, list[list[int]], list[int]]:
    """(transformers' generate: generated tokens/s, prompt + completion ids of every row,
    every row's prompt length)."""
    set_torch_threads(cfg.rollout.cpus_per_worker)
    model, tok = load_model(cfg.model.path, dtype)
    renderer = ChatRenderer(tok, stop_token=tok.eos_token)
    stop = tok.convert_tokens_to_ids(tok.eos_token)
    pad = tok.pad_token_id if tok.pad_token_id is not None else stop
    tokens, seconds, sequences, prompt_lens = 0, 0.0, [], []
    for i, step in enumerate([steps[0], *steps]):  # the first call warms up
        prompts = step_prompts(cfg, step, renderer)
        ids, mask = left_pad(prompts, pad)
        torch.manual_seed(cfg.seed + step)
        t0 = time.perf_counter()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True,
                                 temperature=cfg.rollout.temperature, top_p=1.0, top_k=0,
                                 max_new_tokens=cfg.rollout.max_new_tokens,
                                 eos_token_id=stop, pad_token_id=pad)
        elapsed = time.perf_counter() - t0
        completions = [_to_stop(row.tolist(), stop) for row in out[:, ids.shape[1]:]]
        if i:
            seconds += elapsed
            tokens += sum(map(len, completions))
            sequences += [p + c for p, c in zip(prompts, completions, strict=True)]
            prompt_lens += [len(p) for p in prompts]
    return tokens / seconds, sequences, prompt_lens


def bare_learner(cfg: Config, dtype: str, sequences: list[list[int]], prompt_lens: list[int]
                 ) -> float:
    """Plain torch doing a learner step's work on `sequences`: non-pad tokens/s."""
    set_torch_threads(cfg.learner.resources.cpus)
    model, tok = load_model(cfg.model.path, "float32")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7)
    batch, lc = cfg.rollout.groups_per_step * cfg.rollout.group_size, cfg.learner
    autocast = (torch.autocast("cpu", dtype=torch_dtype(dtype)) if dtype == "bfloat16"
                else contextlib.nullcontext())
    tokens, seconds = 0, 0.0
    for start in range(0, len(sequences) - batch + 1, batch):
        rows = list(range(start, start + batch))
        t0 = time.perf_counter()
        for mini in [rows[i::lc.mini_batches] for i in range(lc.mini_batches)]:
            optimizer.zero_grad()
            for m in range(0, len(mini), lc.micro_batch_size):
                micro = mini[m:m + lc.micro_batch_size]
                ids, mask = right_pad([sequences[i] for i in micro], tok.pad_token_id or 0)
                with autocast:
                    logits = model(input_ids=ids, attention_mask=mask).logits
                logp = F.log_softmax(logits[:, :-1].float(), -1).gather(
                    -1, ids[:, 1:, None]).squeeze(-1)
                reply = torch.zeros_like(logp)
                for r, i in enumerate(micro):
                    reply[r, prompt_lens[i] - 1:len(sequences[i]) - 1] = 1
                (-(logp * reply).sum() / batch).backward()
                tokens += int(mask.sum())
            optimizer.step()
        seconds += time.perf_counter() - t0
    return tokens / seconds


def _to_stop(row: list[int], stop: int) -> list[int]:
    return row[: row.index(stop) + 1] if stop in row else row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="configs/tictactoe_move_smollm2.yaml")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    args = parser.parse_args()
    if args.steps <= WARMUP:
        sys.exit(f"--steps must exceed the {WARMUP} warm-up steps")
    result = {}
    for dtype in args.dtypes.split(","):
        cfg, loop = in_loop(args.config, dtype, args.steps)
        gen, sequences, prompt_lens = bare_generate(cfg, dtype, range(WARMUP, args.steps))
        learner = bare_learner(cfg, dtype, sequences, prompt_lens)
        result[dtype] = {"loop_gen_tok_s": round(loop["gen"], 1), "bare_gen_tok_s": round(gen, 1),
                         "gen_ratio": round(loop["gen"] / gen, 3),
                         "loop_learner_tok_s": round(loop["learner"], 1),
                         "bare_learner_tok_s": round(learner, 1),
                         "learner_ratio": round(loop["learner"] / learner, 3)}
        print(f"{dtype}: generation {loop['gen']:.0f} tok/s in the loop, {gen:.0f} bare "
              f"(ratio {loop['gen'] / gen:.2f}); learner {loop['learner']:.0f} tok/s in the "
              f"loop, {learner:.0f} bare (ratio {loop['learner'] / learner:.2f})", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({"config": args.config, "steps": args.steps, **result,
                      "peak_rss_gib_bench_process": round(peak, 2)}))


if __name__ == "__main__":
    main()
