"""Does a long run collapse? Reward in 100-step windows against the best earlier window.

Usage: python bench/long_run.py RUN_DIR [--window 100] [--plot PNG]

RUN_DIR is a run directory (its metrics.jsonl), e.g. from
    arl train configs/tictactoe_move.yaml steps=2000 learner.optim.schedule=constant
Prints, for sliding windows of `--window` steps of `rollout/reward_mean`: the best window,
the last one, and the largest fall of any window below the best window that ended before it
began (the collapse criterion: no fall over 0.1). The same for the invalid-call rate and the
share of groups with zero variance, and the windows' curve as a PNG with `--plot`. The last
line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np


def windows(values: np.ndarray, width: int) -> np.ndarray:
    """[n - width + 1] means of every `width` consecutive values."""
    sums = np.cumsum(np.r_[0.0, values])
    return (sums[width:] - sums[:-width]) / width


def largest_fall(means: np.ndarray, width: int) -> tuple[float, int]:
    """(how far a window falls below the best window that ended before it began, at most;
    the start step of that window). 0 when no window has an earlier one."""
    fall, at = 0.0, -1
    for start in range(width, len(means)):
        drop = float(means[: start - width + 1].max() - means[start])
        if drop > fall:
            fall, at = drop, start
    return fall, at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir")
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    with open(os.path.join(args.run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        rows = [r for r in map(json.loads, f) if "rollout/reward_mean" in r]
    series = {key: np.array([r[key] for r in rows], dtype=float) for key in (
        "rollout/reward_mean", "rollout/invalid_tool_call_rate", "rollout/zero_variance_groups")}
    width = args.window
    if len(rows) < 2 * width:
        raise SystemExit(f"{len(rows)} steps: need at least {2 * width}")
    reward = windows(series["rollout/reward_mean"], width)
    fall, at = largest_fall(reward, width)
    result = {"steps": len(rows), "window": width,
              "best_window": round(float(reward.max()), 4),
              "best_window_start": int(reward.argmax()),
              "last_window": round(float(reward[-1]), 4),
              "largest_fall": round(fall, 4), "largest_fall_start": at,
              "collapsed": fall > 0.1}
    for key in ("rollout/invalid_tool_call_rate", "rollout/zero_variance_groups"):
        means = windows(series[key], width)
        result[f"{key.split('/')[1]}_first_last"] = [round(float(means[0]), 4),
                                                     round(float(means[-1]), 4)]
    print(f"{len(rows)} steps, {width}-step windows of rollout/reward_mean: best "
          f"{result['best_window']:.3f} (from step {result['best_window_start']}), last "
          f"{result['last_window']:.3f}; largest fall below an earlier best "
          f"{fall:.3f} (window from step {at}): "
          + ("collapsed" if result["collapsed"] else "no collapse (fall <= 0.1)"))
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 3.5))
        steps = np.arange(len(rows))
        ax.plot(steps, series["rollout/reward_mean"], lw=0.4, alpha=0.4, label="step")
        ax.plot(steps[width - 1:], reward, lw=1.6, label=f"{width}-step mean")
        ax.plot(steps[width - 1:], np.maximum.accumulate(reward) - 0.1, lw=0.8, ls="--",
                label="best so far − 0.1")
        ax.set_xlabel("step")
        ax.set_ylabel("rollout/reward_mean")
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
