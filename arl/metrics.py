"""Per-step metrics: what the rollouts say (the sinks they go to live in app/sinks.py).

Metric names are namespaced (rollout/, gspo/, learner/, timing/, perf/); DESIGN.md §3.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

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


def rollout_metrics(summaries: Sequence[EpisodeSummary], group_size: int,
                    outcome_kinds: Sequence[str] = ()) -> Metrics:
    """The rollout signals of one batch of episodes (groups are consecutive, `group_size` each):
    reward, length, tool calls, actions (entropy and a per-square histogram), outcomes.
    `rollout/outcome_<kind>` is logged for every kind in `outcome_kinds` (0 when none
    occurred, so curves have no gaps) and for any other outcome that occurred."""
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
    for outcome in sorted({*outcome_kinds, *outcomes}):
        metrics[f"rollout/outcome_{outcome}"] = outcomes[outcome] / len(summaries)
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
