"""Steps/s and the step's time split with 0 and 2 env-runner actors per rollout worker.

Usage: python bench/env_actors.py [STEPS]   (default 12 steps each of the demo,
configs/tictactoe_move.yaml, and of full games, configs/tictactoe.yaml, which needs
`arl warmstart configs/warmstart_games.yaml` first)

The four runs go one after the other in this process, each on an embedded cluster with the
same actor CPUs (`ray.num_cpus=6`: the configs' learner and rollout worker, two runners; on a
2-core machine the runners share the cores with everything else, so this measures the cost
of moving episodes out of the worker, not a gain). The first WARMUP steps are left out;
means of the rest. `ratio` is steps/s with 2 runners over steps/s with none. The last line
is JSON.
"""

from __future__ import annotations

import json
import sys
import tempfile

import numpy as np

from arl.app.train import train
from arl.config import load_config

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 12
WARMUP = 2
CONFIGS = {"demo": "configs/tictactoe_move.yaml", "full_games": "configs/tictactoe.yaml"}
PARTS = ("generate", "train", "weight_sync", "other")


def run(config: str, runners: int, out: str) -> list[dict]:
    name = f"runners{runners}"
    cfg = load_config([config], [f"steps={STEPS}", f"output_dir={out}", f"run_name={name}",
                                 f"rollout.env_actors={runners}", "ray.num_cpus=6",
                                 "ray.address=local", "wandb.mode=disabled",
                                 "learner.checkpoint.every=0", "eval.every=0"])
    train(cfg)
    with open(f"{out}/{name}/metrics.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f][WARMUP:]


def split(rows: list[dict]) -> dict[str, float]:
    means = {p: float(np.mean([r[f"timing/{p}"] for r in rows])) for p in PARTS}
    return {"s_per_step": float(np.mean([r["timing/step"] for r in rows])), **means}


def main() -> None:
    result = {}
    for label, config in CONFIGS.items():
        times = {}
        for runners in (0, 2):
            with tempfile.TemporaryDirectory() as out:
                times[runners] = split(run(config, runners, out))
            t = times[runners]
            print(f"{label:10} env_actors={runners}: {1 / t['s_per_step']:.3f} steps/s  "
                  + "  ".join(f"{p} {t[p]:.3f} s" for p in PARTS), flush=True)
        result[label] = {"ratio": round(times[0]["s_per_step"] / times[2]["s_per_step"], 3),
                         **{f"runners{n}": {k: round(v, 4) for k, v in t.items()}
                            for n, t in times.items()}}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
