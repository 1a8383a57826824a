"""The learner step under each backend, on one process: what DeepSpeed costs on top of torch.

Usage: python bench/backends.py [MODEL] [--threads N] [--steps K]
MODEL: a model folder (default: the tiny warm-start model; `arl warmstart` builds it).

Times K learner steps (after one warm-up step) of the demo's shape: 64 trajectories of
100-140 tokens, 4 mini-batches, micro-batches of 16, for `learner.resources.backend` torch and
deepspeed ZeRO 1, 2 and 3 (M = 1: a group of one). Prints ms per step and each backend's
ratio to torch; the last line is JSON. All backends run the same steps on the same data, so
their losses must agree, which is printed as the largest relative difference.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from arl.config import LearnerConfig
from arl.learner.gspo_learner import GSPOLearner
from arl.model.causal_lm import set_torch_threads
from arl.schema_learner import LearnerResources, OptimConfig
from arl.types import Trajectory


def batch(seed: int, count: int = 64) -> tuple[list[Trajectory], np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(rng.integers(100, 140))
        mask = np.zeros(n, dtype=np.int8)
        mask[n - 20:] = 1
        out.append(Trajectory(
            token_ids=rng.integers(7, 300, n).astype(np.int32), loss_mask=mask,
            sampler_logprobs=np.where(mask == 1, -rng.uniform(0.5, 3.0, n), 0.0
                                      ).astype(np.float32),
            reward=0.0, group_id=i // 8, policy_version=0, num_turns=1, num_tool_calls=1,
            num_invalid_calls=0, episode_id=i))
    return out, rng.normal(size=count).astype(np.float32)


def time_backend(path: str, backend: str, stage: int, steps: int) -> tuple[float, list[float]]:
    cfg = LearnerConfig(optim=OptimConfig(lr=1e-4),
                        resources=LearnerResources(backend=backend, zero_stage=stage))
    learner = GSPOLearner(path, cfg, "bfloat16", steps + 1, seed=0)
    losses = [learner.step(*batch(0))["learner/loss"]]  # warm-up (DeepSpeed builds here)
    start = time.perf_counter()
    for k in range(steps):
        losses.append(learner.step(*batch(k + 1))["learner/loss"])
    return (time.perf_counter() - start) / steps * 1000, losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="cache:tiny-warmstart")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    set_torch_threads(args.threads)
    results, losses = {}, {}
    for name, backend, stage in (("torch", "torch", 2), ("zero1", "deepspeed", 1),
                                 ("zero2", "deepspeed", 2), ("zero3", "deepspeed", 3)):
        results[name], losses[name] = time_backend(args.model, backend, stage, args.steps)
        print(f"{name:6} {results[name]:8.1f} ms/step  x{results[name] / results['torch']:.2f}",
              flush=True)
    base = np.array(losses["torch"])
    diff = max(float(np.max(np.abs(np.array(v) - base) / np.abs(base))) for v in losses.values())
    print(f"largest relative loss difference to torch: {diff:.1e}")
    print(json.dumps({"ms_per_step": {k: round(v, 1) for k, v in results.items()},
                      "ratio_to_torch": {k: round(v / results["torch"], 2)
                                         for k, v in results.items()},
                      "max_rel_loss_diff": diff}))


if __name__ == "__main__":
    main()
