"""Turn-level credit assignment for multi-turn episodes (`learner.advantage: turn`).

Episode-level GSPO gives every token of an episode one advantage, so in a five-move game the
move that lost it and the four good ones are pushed alike. With per-turn rewards from the env
(EnvStep.reward on every turn) and GiGPO's step-level groups (Feng et al., arXiv 2505.10978):

    R_i,t  = sum_{t' >= t} gamma^(t' - t) r_i,t'              the return from turn t on
    A^E_i  = (R_i,0 - mean_group R_0) / (std_group R_0 + eps)  episode advantage (as today)
    A^S_i,t = (R_i,t - mean_S R) / (std_S R + eps)             S: the turns of the episode's
                                                              group played in the same state
    A_i,t  = A^E_i + w * A^S_i,t

Turns played in the same state (EnvStep.turn_state: the board and the mark to move) by
different episodes of one group share a baseline: their returns differ only by what was
played from there. A state seen once in its group, or one whose returns are all equal,
contributes A^S = 0. Every token of turn t carries A_i,t (the learner's gspo_token or grpo
loss takes per-token advantages).

Pure numpy, no torch: the driver computes these from episode summaries.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np


def returns_to_go(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """R_t = sum_{t' >= t} gamma^(t'-t) r_t' for one episode's turn rewards [T] -> [T]."""
    out = np.zeros(len(rewards), dtype=np.float64)
    running = 0.0
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + gamma * running
        out[t] = running
    return out


def _normalised(values: np.ndarray, eps: float) -> np.ndarray:
    """(v - mean) / (std + eps), exact zeros when all values are equal (population std)."""
    if len(values) < 2 or np.all(values == values[0]):
        return np.zeros_like(values)
    return (values - values.mean()) / (values.std() + eps)


def turn_advantages(turn_rewards: Sequence[Sequence[float]],
                    turn_states: Sequence[Sequence[str | None]], group_size: int,
                    step_weight: float, eps: float, gamma: float = 1.0) -> list[np.ndarray]:
    """A_i,t (module docstring) for every episode i of a batch whose groups are consecutive,
    `group_size` episodes each; one float32 array of turn advantages per episode. A turn
    without a state name (None) gets only the episode advantage."""
    if len(turn_rewards) % group_size or len(turn_states) != len(turn_rewards):
        raise ValueError("episodes must come in whole groups, with a state list each")
    returns = [returns_to_go(r, gamma) for r in turn_rewards]
    out: list[np.ndarray] = []
    for g in range(0, len(returns), group_size):
        members = range(g, g + group_size)
        episode = _normalised(np.array([returns[i][0] if len(returns[i]) else 0.0
                                        for i in members]), eps)
        same_state: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i in members:
            for t, state in enumerate(turn_states[i]):
                if state is not None:
                    same_state[state].append((i, t))
        step = {i: np.zeros(len(returns[i])) for i in members}
        for turns in same_state.values():
            values = _normalised(np.array([returns[i][t] for i, t in turns]), eps)
            for (i, t), v in zip(turns, values, strict=True):
                step[i][t] = v
        for k, i in enumerate(members):
            out.append((episode[k] + step_weight * step[i]).astype(np.float32))
    return out
