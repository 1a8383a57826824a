"""`arl plot`: one PNG dashboard of a run from metrics.jsonl, no wandb needed: reward, move
quality, tool calls, response length, GSPO clip fractions, learner, timing, outcomes, actions,
evaluation, the sampler's log-prob gap to the learner, and the reward of each turn.

Per-step rates of 64 episodes are noisy: the reward and every rate panel draw the raw series
faintly and a trailing mean of `SMOOTH_STEPS` steps on top.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from arl.app.jsonl import json_rows

SMOOTH_STEPS = 10
GRID = (3, 4)  # rows, columns of panels


@dataclass(frozen=True)
class Panel:
    title: str
    ylabel: str
    keys: tuple[str, ...]  # a key ending in "*" takes every metric with that prefix
    smooth: bool = True
    right: tuple[str, ...] = ()  # keys on a second y-axis (their own scale)
    right_label: str = ""


PANELS = (
    Panel("reward", "mean reward per episode", ("rollout/reward_mean",)),
    Panel("move quality", "share of episodes", ("quality/best_or_win", "rollout/outcome_legal",
                                               "game/illegal_rate")),
    Panel("tool calls", "per episode / share of turns", ("rollout/tool_calls_per_episode",
                                                         "rollout/invalid_tool_call_rate")),
    Panel("response length", "sampled tokens per episode", ("rollout/response_len",)),
    Panel("GSPO clip fraction", "share of sequences", ("gspo/clip_fraction_low",
                                                       "gspo/clip_fraction_high")),
    Panel("learner", "loss", ("learner/loss",), smooth=False, right=("learner/grad_norm",),
          right_label="grad norm (before clipping)"),
    Panel("seconds per step", "seconds", ("timing/generate", "timing/train",
                                          "timing/weight_sync", "timing/other"), smooth=False),
    Panel("outcomes", "share of episodes", ("rollout/outcome_*",)),
    Panel("actions, groups, drift", "nats / share of groups", ("rollout/action_entropy",
                                                              "rollout/zero_variance_groups",
                                                              "learner/kl_ref")),
    Panel("evaluation", "share", ("eval/*",), smooth=False),
    Panel("sampler vs learner", "|log-prob gap| per token", ("rollout/sampler_logprob_gap",
                                                           "rollout/sampler_logprob_gap_max"),
          smooth=False),
    Panel("by turn (multi-turn)", "mean reward of turn t", ("turns/reward_t*",)),
)


def trailing_mean(values: list[float], window: int) -> list[float]:
    """values[i] averaged with up to `window - 1` values before it."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def read_metrics(path: str) -> list[dict[str, float]]:
    """Rows of metrics.jsonl, with the derived series the dashboard shows (`quality/...`).
    A line that is not a JSON object with a step (the last one, cut short by a crash or
    still being written) is passed over."""
    rows = [row for _, row in json_rows(path) if isinstance(row.get("step"), int)]
    for row in rows:
        if "rollout/outcome_best" in row:  # the one-move task: a best move or a win
            row["quality/best_or_win"] = (row["rollout/outcome_best"] or 0.0) + (
                row.get("rollout/outcome_win") or 0.0)
    return rows


def series(rows: list[dict], key: str) -> list[tuple[str, list[int], list[float]]]:
    """(name, steps, values) for `key` (or every key with its prefix, if it ends in "*")."""
    names = ([key] if not key.endswith("*") else
             sorted({k for r in rows for k in r if k.startswith(key[:-1])
                     and isinstance(r[k], int | float)}))
    out = []
    for name in names:
        points = [(r["step"], r[name]) for r in rows if isinstance(r.get(name), int | float)]
        if points:
            xs, ys = zip(*points, strict=True)
            out.append((name, list(xs), list(ys)))
    return out


def plot_run(run_dir: str, out: str | None = None) -> str:
    """Write `curves.png` (or `out`) for the run in `run_dir`; return its path. Raises
    UserError if the folder holds no metrics.jsonl."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_file(run_dir))
    fig, axes = plt.subplots(GRID[0], GRID[1], figsize=(5 * GRID[1], 4 * GRID[0]))
    for ax, panel in zip(axes.flat, PANELS, strict=False):
        _draw(ax, rows, panel)
    for ax in axes.flat[len(PANELS):]:
        ax.axis("off")
    fig.suptitle(os.path.basename(os.path.normpath(run_dir)))
    fig.tight_layout()
    path = out or os.path.join(run_dir, "curves.png")
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def _draw(ax, rows: list[dict], panel: Panel) -> None:
    for key in panel.keys:
        for name, xs, ys in series(rows, key):
            label = name.split("/", 1)[1]
            if panel.smooth:
                line, = ax.plot(xs, ys, linewidth=0.6, alpha=0.3)
                ax.plot(xs, trailing_mean(ys, SMOOTH_STEPS), linewidth=1.6,
                        color=line.get_color(), label=f"{label} ({SMOOTH_STEPS}-step mean)")
            else:
                ax.plot(xs, ys, linewidth=1, label=label)
    handles = list(ax.lines)
    if panel.right:
        twin = ax.twinx()
        for key in panel.right:
            for name, xs, ys in series(rows, key):
                twin.plot(xs, ys, linewidth=1, color="tab:red", label=name.split("/", 1)[1])
        twin.set_ylabel(panel.right_label)
        handles += list(twin.lines)
    ax.set_title(panel.title)
    ax.set_xlabel("step")
    ax.set_ylabel(panel.ylabel)
    ax.grid(alpha=0.3)
    labelled = [h for h in handles if not h.get_label().startswith("_")]
    if labelled:  # a panel with no metric yet gets no (empty) legend
        ax.legend(labelled, [h.get_label() for h in labelled], fontsize=7)


def metrics_file(run_dir: str) -> str:
    """RUN_DIR/metrics.jsonl; UserError naming what is missing."""
    from arl.errors import UserError

    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isdir(run_dir):
        raise UserError(f"no run directory at {run_dir}")
    if not os.path.isfile(path):
        raise UserError(f"{run_dir} holds no metrics.jsonl (is it a run directory? runs are "
                        "in runs/<run_name>/)")
    return path
