"""Per-step metrics: what the rollouts say, and where metrics go (jsonl, wandb, terminal).

Metric names are namespaced (rollout/, gspo/, learner/, timing/, perf/); DESIGN.md §3.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from arl.types import EpisodeSummary, Histogram

Metrics = dict[str, float | Histogram]
# Episode outcomes as each env names them -> the four game-outcome rates every run logs.
OUTCOME_RATES = {
    "game/win_rate": ("win",),
    "game/draw_rate": ("draw",),
    "game/loss_rate": ("loss",),
    "game/illegal_rate": ("invalid", "invalid_call", "illegal_move"),  # an invalid turn ended it
}


def rollout_metrics(summaries: Sequence[EpisodeSummary], group_size: int) -> Metrics:
    """The seed's signals for one batch of episodes (groups are consecutive, `group_size` each):
    reward, length, tool calls, actions (entropy and a per-square histogram), outcomes."""
    rewards = np.array([s.reward for s in summaries], dtype=np.float64)
    turns = sum(s.num_turns for s in summaries)
    metrics = {
        "rollout/reward_mean": float(rewards.mean()),
        "rollout/reward_std": float(rewards.std()),
        "rollout/response_len": float(np.mean([s.response_len for s in summaries])),
        "rollout/turns_per_episode": turns / len(summaries),
        "rollout/tool_calls_per_episode": float(np.mean([s.num_tool_calls for s in summaries])),
        "rollout/invalid_tool_call_rate": sum(s.num_invalid_calls for s in summaries)
        / max(turns, 1),
        "rollout/failed_episodes": float(sum(s.failure is not None for s in summaries)),
        "rollout/action_entropy": action_entropy(summaries),
        "rollout/zero_variance_groups": float(
            np.mean(rewards.reshape(-1, group_size).std(axis=1) == 0)
        ),
    }
    outcomes = Counter(str(s.info["outcome"]) for s in summaries if "outcome" in s.info)
    for outcome, count in sorted(outcomes.items()):
        metrics[f"rollout/outcome_{outcome}"] = count / len(summaries)
    for key, names in OUTCOME_RATES.items():
        metrics[key] = sum(outcomes[n] for n in names) / len(summaries)
    return {**metrics, "rollout/action_hist": action_histogram(summaries)}


def action_histogram(summaries: Sequence[EpisodeSummary]) -> Histogram:
    """Counts of each chosen square/column (1..9 for tic-tac-toe, wider if an env has more)."""
    chosen = [sq for s in summaries for sq in chosen_squares(s)]
    top = max([9, *chosen])
    return Histogram.of(chosen, bins=np.arange(0.5, top + 1.0))


def chosen_squares(summary: EpisodeSummary) -> list[int]:
    """Every square/column the agent chose in an episode, as the env reported it."""
    for key in ("squares", "columns"):  # full games report every move
        if key in summary.info:
            return [int(x) for x in summary.info[key] if x is not None]
    if summary.info.get("square") is None:
        return []
    return [int(summary.info["square"])]


def action_entropy(summaries: Sequence[EpisodeSummary]) -> float:
    """Entropy (nats) of the distribution of chosen actions over the batch; 0 if none."""
    counts = Counter(sq for s in summaries for sq in chosen_squares(s))
    total = sum(counts.values())
    if total == 0:
        return 0.0
    return float(-sum(c / total * math.log(c / total) for c in counts.values()))


class JsonlLogger:
    """Appends one JSON object per step to `path` and flushes it, so a crash loses nothing."""

    def __init__(self, path: str):
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed in close())

    def log(self, step: int, metrics: Metrics) -> None:
        row = {"step": step, **{k: _jsonable(v) for k, v in sorted(metrics.items())}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _jsonable(value: float | Histogram) -> float | None | dict[str, list]:
    """A histogram as its JSON dict; a number as itself, or None (null) if not finite."""
    if isinstance(value, Histogram):
        return value.as_json()
    value = float(value)
    return value if math.isfinite(value) else None


class WandbLogger:
    """wandb in online, offline or disabled mode; it never prompts for a key. `run_id`
    continues an existing wandb run (a resumed training run) instead of starting one."""

    def __init__(self, mode: str, project: str, entity: str, name: str, run_dir: str,
                 config: dict[str, Any], run_id: str | None = None):
        import wandb  # heavy import at the edge

        if mode == "online" and not os.environ.get("WANDB_API_KEY") and not netrc_has_wandb():
            raise RuntimeError("wandb.mode=online needs WANDB_API_KEY (or `wandb login`)")
        self._run = wandb.init(
            mode=mode,
            project=project,
            entity=entity or None,
            name=name,
            id=run_id,
            resume="allow" if run_id else None,
            dir=run_dir,
            config=config,
            settings=wandb.Settings(silent=True, console="off"),
        )

    @property
    def run_id(self) -> str:
        return str(self._run.id)

    @property
    def run_dir(self) -> str:
        return str(self._run.dir)

    def log(self, step: int, metrics: Metrics) -> None:
        import wandb

        self._run.log({k: wandb.Histogram(np_histogram=(list(v.counts), list(v.edges)))
                       if isinstance(v, Histogram) else v for k, v in metrics.items()},
                      step=step)

    def log_samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        """A table of sample conversations (`samples` in wandb) at `step`."""
        import wandb

        columns = ["step", "group_id", "reward", "outcome", "conversation"]
        table = wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in rows])
        self._run.log({"samples": table}, step=step)

    def close(self) -> None:
        self._run.finish()


def netrc_has_wandb() -> bool:
    """Whether ~/.netrc holds a wandb key (`wandb login` writes it there)."""
    path = os.path.expanduser("~/.netrc")
    return os.path.isfile(path) and "api.wandb.ai" in open(path, encoding="utf-8").read()
