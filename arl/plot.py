"""`arl plot`: one PNG of a run's key curves from metrics.jsonl, no wandb needed."""

from __future__ import annotations

import json
import os

PANELS = (
    ("reward", ("rollout/reward_mean",)),
    ("response length (sampled tokens)", ("rollout/response_len",)),
    ("tool calls", ("rollout/tool_calls_per_episode", "rollout/invalid_tool_call_rate")),
    ("GSPO clip fraction", ("gspo/clip_fraction_low", "gspo/clip_fraction_high")),
    ("learner", ("learner/loss", "learner/grad_norm")),
    ("seconds per step", ("timing/generate", "timing/train", "timing/weight_sync", "timing/other")),
)


def read_metrics(path: str) -> list[dict[str, float]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def plot_run(run_dir: str, out: str | None = None) -> str:
    """Write `curves.png` (or `out`) for the run in `run_dir`; return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (title, keys) in zip(axes.flat, PANELS, strict=True):
        for key in keys:
            points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, label=key.split("/", 1)[1], linewidth=1)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(os.path.basename(os.path.normpath(run_dir)))
    fig.tight_layout()
    path = out or os.path.join(run_dir, "curves.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
