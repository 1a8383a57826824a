"""How a step's cost grows: group size, batch size and rollout workers, on this machine.

Usage: python bench/scaling.py [STEPS]   (default 10; needs `arl warmstart` first)

Runs STEPS sync steps of the demo config (`configs/tictactoe_move.yaml`) on an embedded Ray
cluster for each setting below, one after the other in this process, and prints a table of
the mean step time and its phases, leaving out the first WARMUP steps:
  group size   G = 4, 8, 16 at a fixed batch of 64 episodes (16, 8, 4 boards)
  batch size   8 boards x G = 8: 32, 64 and 128 episodes (4, 8, 16 boards)
  workers      1 rollout worker with 2 threads against 2 workers with 1 thread each, batch 64
Each row also gives the time per episode, which is flat when cost grows linearly. The
policy is the warm-start model, never updated in a way that matters over so few steps, so
response lengths are comparable across rows. The last line is JSON, one object per row.
"""

from __future__ import annotations

import json
import sys
import tempfile

from app.train import train
from arl.config import load_config

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
WARMUP = 2
CONFIG = "configs/tictactoe_move.yaml"
SETTINGS: list[tuple[str, list[str]]] = [
    ("G=4, 16 boards", ["rollout.group_size=4", "rollout.groups_per_step=16"]),
    ("G=8, 8 boards", ["rollout.group_size=8", "rollout.groups_per_step=8"]),
    ("G=16, 4 boards", ["rollout.group_size=16", "rollout.groups_per_step=4"]),
    ("batch 32", ["rollout.groups_per_step=4"]),
    ("batch 128", ["rollout.groups_per_step=16"]),
    ("2 workers x 1 thread", ["rollout.num_workers=2", "rollout.cpus_per_worker=1"]),
]
KEYS = ("timing/step", "timing/generate", "timing/train", "timing/weight_sync", "timing/other",
        "rollout/response_len")


def run(overrides: list[str], out: str) -> dict[str, float]:
    cfg = load_config([CONFIG], [f"steps={STEPS}", f"output_dir={out}", "wandb.mode=disabled",
                                 "ray.address=local", "learner.checkpoint_every=0",
                                 *overrides])
    train(cfg, use_ray=True)
    with open(f"{out}/{cfg.run_name}/metrics.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f][WARMUP:]
    means = {k: sum(r[k] for r in rows) / len(rows) for k in KEYS}
    episodes = cfg.rollout.groups_per_step * cfg.rollout.group_size
    return {**means, "episodes": episodes, "ms_per_episode": 1000 * means["timing/step"] / episodes}


def main() -> None:
    results = []
    for name, overrides in SETTINGS:
        with tempfile.TemporaryDirectory() as out:
            results.append({"setting": name, **run(overrides, out)})
    print("| setting | episodes | s/step | generate | train | sync | other | ms/episode |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['setting']} | {r['episodes']} | {r['timing/step']:.2f} | "
              f"{r['timing/generate']:.2f} | {r['timing/train']:.2f} | "
              f"{r['timing/weight_sync']:.3f} | {r['timing/other']:.3f} | "
              f"{r['ms_per_episode']:.1f} |")
    print(json.dumps([{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                      for r in results]))


if __name__ == "__main__":
    main()
