"""How a step's cost grows: group size, batch size and rollout workers, on this machine.

Usage: python bench/scaling.py [STEPS]   (default 10; needs `arl warmstart` first)
       python bench/scaling.py --episodes 64,128,256,512,1024 [--steps 3]

Runs STEPS sync steps of the demo config (`configs/tictactoe_move.yaml`) on an embedded Ray
cluster for each setting below, one after the other in this process, and prints a table of
the mean step time and its phases, leaving out the first WARMUP steps:
  group size   G = 4, 8, 16 at a fixed batch of 64 episodes (16, 8, 4 boards)
  batch size   8 boards x G = 8: 32, 64 and 128 episodes (4, 8, 16 boards)
  workers      1 rollout worker with 2 threads against 2 workers with 1 thread each, batch 64
Each row also gives the time per episode, which is flat when cost grows linearly. The
policy is the warm-start model, never updated in a way that matters over so few steps, so
response lengths are comparable across rows. The last line is JSON, one object per row.

With --episodes, each row is a batch of that many episodes (groups of 8), with its time per
episode and the run's peak memory: the largest sum, over every process of the run (driver,
actors, Ray's daemons), of the proportional set size (PSS: shared pages split among the
processes that map them, so nothing counts twice), sampled every 0.5 s, against what
`arl plan` predicts for the same config (its host pool).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading

import psutil

from arl.app.plan import GIB, Machine, model_shape, prompt_tokens, report
from arl.app.train import train
from arl.config import load_config
from arl.model.source import local_folder

STEPS = 10
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


class PeakPss:
    """The peak, over samples every `every` s, of the summed PSS of this process and all
    its descendants (an embedded Ray cluster's daemons and actors among them)."""

    def __init__(self, every: float = 0.5):
        self.every, self.peak = every, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(self.every):
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_full_info().pss
                except psutil.Error:
                    continue  # ended between listing and reading
            self.peak = max(self.peak, total)

    def __enter__(self) -> PeakPss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run(overrides: list[str], out: str, steps: int = STEPS, warmup: int = WARMUP
        ) -> dict[str, float]:
    cfg = load_config([CONFIG], [f"steps={steps}", f"output_dir={out}", "wandb.mode=disabled",
                                 "ray.address=local", "learner.checkpoint.every=0",
                                 *overrides])
    with PeakPss() as memory:
        train(cfg)
    with open(f"{out}/{cfg.run_name}/metrics.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f][warmup:]
    means = {k: sum(r[k] for r in rows) / len(rows) for k in KEYS}
    episodes = cfg.rollout.groups_per_step * cfg.rollout.group_size
    return {**means, "episodes": episodes, "ms_per_episode": 1000 * means["timing/step"] / episodes,
            "peak_gib": memory.peak / GIB, "plan_gib": planned_gib(cfg)}


def planned_gib(cfg) -> float:
    """`arl plan`'s host pool for `cfg` on this machine (GiB)."""
    cfg.model.path = local_folder(cfg.model.path)  # as `arl plan` resolves it
    shape = model_shape(cfg.model.path, cfg.learner.lora.target_modules)
    _, summary, _ = report(cfg, shape, Machine(psutil.virtual_memory().total, None),
                           prompt_tokens(cfg))
    return summary["pools_gib"]["host"]["planned"]


def by_episodes(counts: list[int], steps: int) -> None:
    """One row per batch size: time per episode, peak memory, and the plan's prediction."""
    results = []
    for n in counts:
        with tempfile.TemporaryDirectory() as out:
            results.append(run(["rollout.group_size=8", f"rollout.groups_per_step={n // 8}"],
                               out, steps, warmup=1))
    print("| episodes | s/step | generate | train | ms/episode | peak GiB | plan GiB | "
          "plan / peak |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['episodes']} | {r['timing/step']:.2f} | {r['timing/generate']:.2f} | "
              f"{r['timing/train']:.2f} | {r['ms_per_episode']:.1f} | {r['peak_gib']:.2f} | "
              f"{r['plan_gib']:.2f} | {r['plan_gib'] / r['peak_gib']:.2f} |")
    print(json.dumps([{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                      for r in results]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("steps", nargs="?", type=int, default=STEPS)
    parser.add_argument("--episodes", default="", help="comma-separated batch sizes")
    parser.add_argument("--steps", dest="steps_opt", type=int, default=3,
                        help="--episodes: steps per row (the first is left out)")
    args = parser.parse_args()
    if args.episodes:
        by_episodes([int(n) for n in args.episodes.split(",")], args.steps_opt)
        return
    results = []
    for name, overrides in SETTINGS:
        with tempfile.TemporaryDirectory() as out:
            results.append({"setting": name, **run(overrides, out, args.steps)})
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
