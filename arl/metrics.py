"""Per-step metrics: what the rollouts say (the sinks they go to live in arl/app/sinks.py).

Metric names are namespaced (rollout/, gspo/, learner/, timing/, perf/): docs/ARCHITECTURE.md,
Glossary.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import numpy as np

from arl.types import EpisodeSummary, Histogram

Metrics = dict[str, float | Histogram]
# Outcome.result -> the game-outcome rates every run logs (invalid: an invalid turn ended it).
RESULT_RATES = {"game/win_rate": "win", "game/draw_rate": "draw", "game/loss_rate": "loss",
                "game/illegal_rate": "invalid"}


def rollout_metrics(summaries: Sequence[EpisodeSummary], group_size: int,
                    outcome_kinds: Sequence[str] = ()) -> Metrics:
    """The rollout signals of one batch of episodes (groups are consecutive, `group_size` each):
    reward, length, tool calls, actions (entropy and a histogram), outcomes.
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
    ended = [s.outcome for s in summaries if s.outcome is not None]
    outcomes = Counter(o.kind for o in ended)
    for outcome in sorted({*outcome_kinds, *outcomes}):
        metrics[f"rollout/outcome_{outcome}"] = outcomes[outcome] / len(summaries)
    results = Counter(o.result for o in ended)
    for key, result in RESULT_RATES.items():
        metrics[key] = results[result] / len(summaries)
    return {**metrics, **episode_metrics(summaries), **turn_metrics(summaries, group_size),
            "rollout/action_hist": action_histogram(summaries)}


TURNS_SHOWN = 10  # turn indices with metrics of their own (later turns are rare and noisy)


def turn_metrics(summaries: Sequence[EpisodeSummary], group_size: int) -> Metrics:
    """Multi-turn episodes by turn index t (1-based, up to TURNS_SHOWN): the mean reward of
    turn t over the episodes that played it, the share of episodes that ended at turn t and
    that won there; and the mean number of distinct states among a group's turns t (1: every
    episode of the group was in the same state, what a per-state baseline needs). Empty when
    no episode took a second turn."""
    longest = max((s.num_turns for s in summaries), default=0)
    if longest < 2:
        return {}
    out: Metrics = {}
    ends = Counter(min(s.num_turns, TURNS_SHOWN + 1) for s in summaries)
    wins = Counter(min(s.num_turns, TURNS_SHOWN + 1) for s in summaries
                   if s.outcome is not None and s.outcome.result == "win")
    for t in range(1, min(longest, TURNS_SHOWN) + 1):
        rewards = [s.turns[t - 1].reward for s in summaries if len(s.turns) >= t]
        out[f"turns/reward_t{t}"] = float(np.mean(rewards)) if rewards else math.nan
        out[f"turns/ended_t{t}"] = ends[t] / len(summaries)
        out[f"turns/won_t{t}"] = wins[t] / len(summaries)
    distinct = []
    for g in range(0, len(summaries), group_size):
        group = summaries[g:g + group_size]
        for t in range(max(len(s.turns) for s in group)):
            states = {s.turns[t].state for s in group if len(s.turns) > t}
            if None not in states:
                distinct.append(len(states))
    if distinct:
        out["turns/states_per_group_turn"] = float(np.mean(distinct))
    return out


def episode_metrics(summaries: Sequence[EpisodeSummary]) -> dict[str, float]:
    """The episodes' own metrics (`EpisodeSummary.metrics`): `rollout/*` counts summed over
    the batch, anything else (an agent's `agent/*`) averaged over the episodes that report it."""
    values: dict[str, list[float]] = {}
    for s in summaries:
        for key, value in s.metrics.items():
            values.setdefault(key, []).append(value)
    return {key: float(sum(v) if key.startswith("rollout/") else np.mean(v))
            for key, v in sorted(values.items())}


def action_histogram(summaries: Sequence[EpisodeSummary]) -> Histogram:
    """Counts of each chosen action number, one bin per number from 1 to the largest chosen
    (at least 9 bins, so curves of small action spaces keep one shape)."""
    chosen = [a for s in summaries for a in chosen_actions(s)]
    top = max([9, *chosen])
    return Histogram.of(chosen, bins=np.arange(0.5, top + 1.0))


def chosen_actions(summary: EpisodeSummary) -> tuple[int, ...]:
    """Every numbered action the agent took in an episode, as its env reported it."""
    return summary.outcome.actions if summary.outcome is not None else ()


def action_entropy(summaries: Sequence[EpisodeSummary]) -> float:
    """Entropy (nats) of the distribution of chosen actions over the batch; 0 if none."""
    counts = Counter(a for s in summaries for a in chosen_actions(s))
    total = sum(counts.values())
    if total == 0:
        return 0.0
    return float(-sum(c / total * math.log(c / total) for c in counts.values()))
