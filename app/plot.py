"""`arl plot`: one PNG dashboard of a run from metrics.jsonl, no wandb needed: reward,
response length, tool-call stability, GSPO clip fractions, learner, timing, game outcomes,
actions."""

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
    ("game outcomes", ("game/win_rate", "game/draw_rate", "game/loss_rate", "game/illegal_rate")),
    ("actions and groups", ("rollout/action_entropy", "rollout/zero_variance_groups")),
)


SMOOTH_STEPS = 10  # the reward panel also shows this trailing mean: one step is 64 episodes


def trailing_mean(values: list[float], window: int) -> list[float]:
    """values[i] averaged with up to `window - 1` values before it."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def read_metrics(path: str) -> list[dict[str, float]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def plot_run(run_dir: str, out: str | None = None) -> str:
    """Write `curves.png` (or `out`) for the run in `run_dir`; return its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(os.path.join(run_dir, "metrics.jsonl"))
    fig, axes = plt.subplots(2, 4, figsize=(20, 8))
    for ax, (title, keys) in zip(axes.flat, PANELS, strict=True):
        for key in keys:
            points = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), int | float)]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, label=key.split("/", 1)[1], linewidth=1)
                if key == "rollout/reward_mean":
                    ax.plot(xs, trailing_mean(list(ys), SMOOTH_STEPS), linewidth=2,
                            label=f"{SMOOTH_STEPS}-step mean")
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if ax.lines:  # a panel with no metric yet gets no (empty) legend
            ax.legend(fontsize=8)
    fig.suptitle(os.path.basename(os.path.normpath(run_dir)))
    fig.tight_layout()
    path = out or os.path.join(run_dir, "curves.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
