"""Async against sync throughput on this machine, with the same fixed CPUs in both modes.

Usage: python bench/async.py [STEPS] [CONFIG]   (default 20 steps of configs/tictactoe.yaml,
full games, where generation and training take comparable time on a 2-core CPU; it needs
`arl warmstart configs/warmstart_games.yaml` first)

Both runs give the rollout worker one core and the learner one core (`configs/async.yaml`),
one after the other in this process. From the sync run's own phases,
`ideal` = (gen + train) / max(gen, train) is the speedup perfect overlap would give; the
async run (max_staleness 1) gives `async_speedup` = its steps/s over sync's. The first
WARMUP steps of each run are left out. The last line is JSON.
"""

from __future__ import annotations

import json
import sys
import tempfile

import numpy as np

from arl.app.train import train
from arl.config import load_config

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
WARMUP = 3
CONFIGS = [sys.argv[2] if len(sys.argv) > 2 else "configs/tictactoe.yaml", "configs/async.yaml"]


def run(mode: str, out: str) -> list[dict]:
    cfg = load_config(CONFIGS, [f"mode={mode}", f"steps={STEPS}", f"output_dir={out}",
                                f"run_name={mode}", "wandb.mode=disabled", "ray.address=local",
                                "learner.checkpoint.every=0"])
    train(cfg)
    with open(f"{out}/{mode}/metrics.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f][WARMUP:]


def mean(rows: list[dict], key: str) -> float:
    return float(np.mean([r[key] for r in rows]))


def main() -> None:
    with tempfile.TemporaryDirectory() as out:
        sync, async_ = run("sync", out), run("async", out)
    gen = mean(sync, "timing/generate")
    train_s = mean(sync, "timing/train") + mean(sync, "timing/weight_sync")
    ideal = (gen + train_s) / max(gen, train_s)
    speedup = mean(sync, "timing/step") / mean(async_, "timing/step")
    print(f"sync : {mean(sync, 'timing/step'):.3f} s/step (generate {gen:.3f} s, "
          f"train + sync {train_s:.3f} s)")
    print(f"async: {mean(async_, 'timing/step'):.3f} s/step (staleness mean "
          f"{mean(async_, 'async/staleness_mean'):.2f}, learner idle "
          f"{mean(async_, 'timing/learner_idle'):.3f} s, rollout idle "
          f"{mean(async_, 'timing/rollout_idle'):.3f} s per step)")
    print(f"reward over the measured steps: sync {mean(sync, 'rollout/reward_mean'):.3f}, "
          f"async {mean(async_, 'rollout/reward_mean'):.3f}")
    print(json.dumps({"async_speedup": round(speedup, 3), "ideal": round(ideal, 3),
                      "ratio_to_ideal": round(speedup / ideal, 3),
                      "sync_s_per_step": round(mean(sync, "timing/step"), 4),
                      "async_s_per_step": round(mean(async_, "timing/step"), 4)}))


if __name__ == "__main__":
    main()
