"""Ablations: one config trained in several variants on the same seed and budget, one after
the other (never two at once: they would share the cores), and their curves side by side.

    python bench/ablation.py CONFIG [--steps N] [--out DIR] NAME=key=value,key=value ...

Each variant is NAME followed by its overrides (`base=` for none). Prints a table of the
reward over the first 5 and last 10 steps, the best 10-step mean, invalid calls at the end,
the share of minimax-best moves and wins (the one-move task), the last evaluation's
eval/* numbers, and seconds; writes OUT/ablation.png (reward against step and against
wall-clock) and a JSON last line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from arl.app.plot import read_metrics, trailing_mean  # noqa: E402
from arl.app.train import train  # noqa: E402
from arl.config import load_config  # noqa: E402

EVAL_SHOWN = ("eval/win_in_one_accuracy", "eval/block_in_one_accuracy",
              "eval/minimax_as_X_draw", "eval/minimax_as_O_draw",
              "eval/eps_minimax_0.3_as_X_nonloss", "eval/eps_minimax_0.3_as_O_nonloss")


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def summarize(rows: list[dict], seconds: float) -> dict:
    reward = [r["rollout/reward_mean"] for r in rows]
    smooth = trailing_mean(reward, 10)
    last_eval = next((r for r in reversed(rows) if "eval/policy_version" in r), {})
    best_or_win = [r["quality/best_or_win"] for r in rows if "quality/best_or_win" in r]
    return {
        "first5": _mean(reward[:5]), "last10": _mean(reward[-10:]),
        "best10": max(smooth[9:] or smooth), "invalid_last10": _mean(
            [r["rollout/invalid_tool_call_rate"] for r in rows[-10:]]),
        "best_or_win_last10": _mean(best_or_win[-10:]),
        "seconds": seconds, **{k: last_eval[k] for k in EVAL_SHOWN if k in last_eval},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config")
    parser.add_argument("variants", nargs="+", help="NAME=key=value,key=value (base= for none)")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--out", default="runs/ablation")
    args = parser.parse_args()
    results, curves = {}, {}
    for spec in args.variants:
        name, _, overrides = spec.partition("=")
        extra = [o for o in overrides.split(",") if o]
        if args.steps:
            extra.append(f"steps={args.steps}")
        cfg = load_config([args.config], [f"run_name={name}", f"output_dir={args.out}",
                                          "wandb.mode=disabled", *extra])
        start = time.perf_counter()
        train(cfg)
        seconds = time.perf_counter() - start
        rows = read_metrics(os.path.join(args.out, name, "metrics.jsonl"))
        results[name] = summarize(rows, seconds)
        curves[name] = rows
        print(f"{name}: {json.dumps(results[name])}", flush=True)
    _print_table(results)
    _plot(curves, os.path.join(args.out, "ablation.png"))
    print(json.dumps(results))


def _print_table(results: dict) -> None:
    keys = ["first5", "last10", "best10", "invalid_last10", "best_or_win_last10", "seconds",
            *EVAL_SHOWN]
    present = [k for k in keys if any(k in r for r in results.values())]
    print("| variant | " + " | ".join(k.removeprefix("eval/") for k in present) + " |")
    print("|---" * (len(present) + 1) + "|")
    for name, r in results.items():
        cells = [f"{r[k]:.0f}" if k == "seconds" else f"{r[k]:+.3f}" if k in r else ""
                 for k in present]
        print(f"| {name} | " + " | ".join(cells) + " |")


def _plot(curves: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(14, 5))
    for name, rows in curves.items():
        reward = trailing_mean([r["rollout/reward_mean"] for r in rows], 10)
        steps = [r["step"] for r in rows]
        seconds, total = [], 0.0
        for r in rows:
            total += r.get("timing/step") or 0.0
            seconds.append(total / 60)
        by_step.plot(steps, reward, label=name)
        by_time.plot(seconds, reward, label=name)
    for ax, xlabel in ((by_step, "step"), (by_time, "minutes")):
        ax.set_xlabel(xlabel)
        ax.set_ylabel("reward (10-step mean)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


if __name__ == "__main__":
    main()
