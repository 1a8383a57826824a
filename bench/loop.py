"""The training loop against its physical limits, measured in one run on this machine.

Usage: python bench/loop.py [STEPS] [REPEATS]   (default 20 steps, 3 repeats; needs
the demo's warm start first: `arl warmstart configs/warmstart_board.yaml`)

Each repeat runs STEPS sync steps of the demo config on an embedded Ray cluster (its policy
held at the warm start, see `loop_run`), then, in this process with the same thread count,
the bare pieces on the same work:
  bare engine    `HFEngine.generate` on the same start states' prompts, the same sampling
                 settings, one call per step: generated tokens/s
  bare learner   plain torch on batches of the same shape: for each mini-batch, a no-grad
                 forward (the old log-probs), then forward + backward per micro-batch and an
                 AdamW step: forward+backward tokens/s (the learner's own unit)
  same learner   arl's own `GSPOLearner` in this process, without Ray, on the same
                 sequences (one step of groups_per_step x group_size rows each): its
                 `perf/train_tokens` per second
  memcpy         one copy of the exported weights' bytes
and prints
  gen_ratio       in-loop generated tokens/s over the bare engine's
  learner_ratio   in-loop learner tokens/s over the bare learner's
  learner_ratio_same_code  in-loop learner tokens/s over the same learner's in this process
  overhead_share  the share of a step that the bare engine's generation and the same
                  learner's training of the step's tokens, in this process, do not explain
                  (Ray, serialization, weight sync, env, other)
  sync_bw_ratio   weight-sync bandwidth (exported bytes / timing/weight_sync) over memcpy's
  flop_limit_ratio  the step's time over the time its nominal FLOPs take at this CPU's best
                  bf16 matrix-product rate (bench/flop_limit.py; `_fp32` at the fp32 rate)
and, measured alone, the floor under a weight sync: an empty Ray actor call, a hand-over of
the weights to an actor through the object store, and the engine's own load (ms).
The first WARMUP steps are left out. Medians over the repeats; the last line is JSON.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import tempfile
import time

import numpy as np
import torch
from flop_limit import matmul_peak, model_shape, step_flops
from model_speed import step_prompts

from arl.app.train import train
from arl.config import Config, load_config
from arl.episode import ChatRenderer
from arl.learner.collate import right_pad
from arl.model.causal_lm import load_model, token_logprobs
from arl.model_source import local_path
from arl.rollout.engines.hf import HFEngine
from arl.types import SamplingParams, Trajectory

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
REPEATS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
WARMUP = 3
CONFIG = "configs/tictactoe_move.yaml"


def loop_run(out: str) -> tuple[Config, list[dict]]:
    # lr 1e-12: every step does the learner's whole work, but the policy stays the warm start
    # that the bare engine loads, so both sample the same kind of completions (a trained
    # policy's shorter, surer replies would make tokens/s incomparable).
    cfg = load_config([CONFIG], [f"steps={STEPS}", f"output_dir={out}", "wandb.mode=disabled",
                                 "ray.address=local", "learner.checkpoint.every=0",
                                 "learner.optim.lr=1e-12"])
    train(cfg)
    # the bare pieces load the same folder (a cache:<name> path names one in $ARL_HOME)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(
        cfg.model, path=local_path(cfg.model.path)))
    with open(f"{out}/{cfg.run_name}/metrics.jsonl", encoding="utf-8") as f:
        return cfg, [json.loads(line) for line in f][WARMUP:]


def bare_engine(cfg: Config, steps: range) -> tuple[float, list[list[int]], list[int]]:
    """(generated tokens/s, full sequences, prompt lengths) of the bare engine."""
    torch.set_num_threads(cfg.rollout.cpus_per_worker)
    engine = HFEngine(cfg.model.path, dtype=cfg.model.dtype)
    tok = engine.get_tokenizer()
    renderer = ChatRenderer(tok, stop_token=tok.eos_token)
    r = cfg.rollout
    engine.generate(step_prompts(cfg, 0, renderer),
                    SamplingParams(r.temperature, r.top_p, r.max_new_tokens, 0))  # warm-up
    tokens, seconds, sequences, prompt_lens = 0, 0.0, [], []
    for step in steps:
        prompts = step_prompts(cfg, step, renderer)
        params = SamplingParams(r.temperature, r.top_p, r.max_new_tokens, cfg.seed + step)
        t0 = time.perf_counter()
        out = engine.generate(prompts, params)
        seconds += time.perf_counter() - t0
        tokens += sum(len(g.token_ids) for g in out)
        sequences += [p + g.token_ids.tolist() for p, g in zip(prompts, out, strict=True)]
        prompt_lens += [len(p) for p in prompts]
    return tokens / seconds, sequences, prompt_lens


def bare_learner(cfg: Config, sequences: list[list[int]], batch: int) -> float:
    """Forward+backward tokens/s of plain torch doing the learner's work on `sequences`."""
    torch.set_num_threads(cfg.learner.resources.cpus)
    model, _ = load_model(cfg.model.path, "float32")
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    tokens, seconds = 0, 0.0
    for start in range(0, len(sequences) - batch + 1, batch):
        rows = sequences[start:start + batch]
        t0 = time.perf_counter()
        for mini in np.array_split(np.arange(batch), cfg.learner.optim.mini_batches):
            micros = [mini[i:i + cfg.learner.compute.micro_batch_size]
                      for i in range(0, len(mini), cfg.learner.compute.micro_batch_size)]
            padded = [right_pad([rows[i] for i in m], 0) for m in micros]
            with torch.no_grad():
                for ids, mask in padded:
                    token_logprobs(model, ids, mask)
            optimizer.zero_grad()
            for ids, mask in padded:
                (-token_logprobs(model, ids, mask).sum() / batch).backward()
                tokens += int(mask.sum())
            optimizer.step()
        seconds += time.perf_counter() - t0
    return tokens / seconds


def same_learner(cfg: Config, sequences: list[list[int]], prompt_lens: list[int],
                 batch: int) -> float:
    """`perf/train_tokens` per second of arl's GSPOLearner run in this process (no Ray) on
    `sequences`, `batch` rows a step, G rows a group, seeded advantages."""
    from arl.learner.gspo_learner import GSPOLearner

    torch.set_num_threads(cfg.learner.resources.cpus)
    learner = GSPOLearner(cfg.model.path, cfg.learner, cfg.model.dtype, cfg.steps, cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    size = cfg.rollout.group_size
    steps = []
    for start in range(0, len(sequences) - batch + 1, batch):
        rows = []
        for i in range(start, start + batch):
            ids, n = np.array(sequences[i], dtype=np.int32), prompt_lens[i]
            mask = (np.arange(len(ids)) >= n).astype(np.int8)
            rows.append(Trajectory(
                token_ids=ids, loss_mask=mask,
                sampler_logprobs=np.where(mask == 1, -1.0, 0.0).astype(np.float32),
                reward=0.0, group_id=(i - start) // size, policy_version=0, num_turns=1,
                num_tool_calls=1, num_invalid_calls=0, episode_id=i - start))
        steps.append(rows)
    learner.step(steps[0], rng.normal(size=batch).astype(np.float32))  # warm-up
    tokens, seconds = 0.0, 0.0
    for rows in steps:
        advantages = rng.normal(size=batch).astype(np.float32)
        t0 = time.perf_counter()
        metrics = learner.step(rows, advantages, cfg.rollout.temperature)
        seconds += time.perf_counter() - t0
        tokens += metrics["perf/train_tokens"]
    return tokens / seconds


def memcpy_bytes_per_s(nbytes: int) -> float:
    src, dst = np.ones(nbytes // 4, dtype=np.float32), np.empty(nbytes // 4, dtype=np.float32)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(20):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best


class _Sink:
    """A bare Ray actor: what one call and one weight hand-over cost with nothing else."""

    def noop(self) -> None:
        return None

    def take(self, weights: dict) -> int:
        return len(weights)


def sync_floor_ms(cfg: Config) -> dict[str, float]:
    """The parts of a weight sync measured alone (medians, ms): an empty Ray actor call, a
    call that hands the exported weights to an actor through the object store, and the HF
    engine loading them in-process. Their sum is the floor under `timing/weight_sync`."""
    import ray

    model, _ = load_model(cfg.model.path, "float32")
    weights = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        sink = ray.remote(_Sink).options(num_cpus=0).remote()
        ray.get(sink.noop.remote())

        def timed(call, n: int) -> float:
            times = []
            for _ in range(n):
                t0 = time.perf_counter()
                call()
                times.append(time.perf_counter() - t0)
            return 1000 * statistics.median(times)

        call_ms = timed(lambda: ray.get(sink.noop.remote()), 50)
        hand_ms = timed(lambda: ray.get(sink.take.remote(ray.put(weights))), 20)
    finally:
        ray.shutdown()
    engine = HFEngine(cfg.model.path, dtype=cfg.model.dtype)
    load_ms = timed(lambda: engine.update_weights(weights, 1), 20)
    return {"ray_call_ms": call_ms, "ray_weights_ms": hand_ms, "engine_load_ms": load_ms}


def one_repeat() -> dict[str, float]:
    with tempfile.TemporaryDirectory() as out:
        cfg, rows = loop_run(out)
    mean = lambda key: float(np.mean([r[key] for r in rows]))  # noqa: E731
    measured = range(WARMUP, STEPS)
    gen_rate, sequences, prompt_lens = bare_engine(cfg, measured)
    batch = cfg.rollout.groups_per_step * cfg.rollout.group_size
    learner_rate = bare_learner(cfg, sequences, batch)
    same_rate = same_learner(cfg, sequences, prompt_lens, batch)
    model, _ = load_model(cfg.model.path, "float32")
    weight_bytes = sum(t.numel() * 4 for t in model.state_dict().values())
    loop_gen = mean("perf/rollout_tokens_per_s")
    loop_learner = mean("perf/train_tokens_per_s")
    explained = (mean("perf/rollout_tokens_per_s") * mean("timing/generate") / gen_rate
                 + mean("perf/train_tokens_per_s") * mean("timing/train") / same_rate)
    # The step's nominal work at this CPU's best matrix-product rate (bench/flop_limit.py):
    # every round of dynamic sampling serves one more batch of prompts and completions.
    parameters, hidden, intermediate = model_shape(cfg.model.path)
    rounds = 1 + mean("rollout/resample_rounds")
    served = rounds * sum(map(len, sequences)) / len(measured)
    flops = step_flops(parameters, served, mean("perf/train_tokens"))
    torch.set_num_threads(max(cfg.rollout.cpus_per_worker, cfg.learner.resources.cpus))
    peak = matmul_peak(hidden, intermediate)
    result = {
        "gen_ratio": loop_gen / gen_rate,
        "learner_ratio": loop_learner / learner_rate,
        "learner_ratio_same_code": loop_learner / same_rate,
        "overhead_share": 1.0 - explained / mean("timing/step"),
        "sync_bw_ratio": weight_bytes / mean("timing/weight_sync") / memcpy_bytes_per_s(
            weight_bytes),
        "flop_limit_ratio": mean("timing/step") / (flops / (peak["bfloat16"] * 1e9)),
        "flop_limit_ratio_fp32": mean("timing/step") / (flops / (peak["float32"] * 1e9)),
    }
    print(f"step work {flops / 1e9:.1f} GFLOP ({parameters / 1e6:.2f}M parameters, "
          f"{served:.0f} tokens served, {mean('perf/train_tokens'):.0f} trained); best "
          f"matrix products {peak['bfloat16']:.0f} GFLOPS bf16, {peak['float32']:.0f} fp32")
    parts = {k: round(mean(f"timing/{k}"), 4)
             for k in ("generate", "train", "weight_sync", "other", "step")}
    print(f"loop: {loop_gen:.0f} gen tok/s, {loop_learner:.0f} learner tok/s, step parts "
          f"{parts}; bare: {gen_rate:.0f} gen tok/s, {learner_rate:.0f} learner tok/s; "
          f"same learner in-process: {same_rate:.0f} tok/s; "
          f"{weight_bytes / 2**20:.1f} MiB of weights")
    floor = sync_floor_ms(cfg)
    print(f"weight sync {1000 * mean('timing/weight_sync'):.1f} ms; measured alone: "
          + ", ".join(f"{k} {v:.2f}" for k, v in floor.items()))
    print({k: round(v, 3) for k, v in result.items()})
    return {**result, **floor}


def main() -> None:
    results = [one_repeat() for _ in range(REPEATS)]
    print(json.dumps({k: round(statistics.median(r[k] for r in results), 4)
                      for k in ("gen_ratio", "learner_ratio", "learner_ratio_same_code",
                                "overhead_share", "sync_bw_ratio",
                                "flop_limit_ratio", "flop_limit_ratio_fp32", "ray_call_ms",
                                "ray_weights_ms", "engine_load_ms")}))


if __name__ == "__main__":
    main()
