"""Turn-level credit assignment for multi-turn episodes (`learner.advantage.level: turn`).

Episode-level GSPO gives every token of an episode one advantage, so in a five-move game the
move that lost it and the four good ones are pushed alike. With per-turn rewards from the env
(EnvStep.reward on every turn) and GiGPO's step-level groups (Feng et al., arXiv 2505.10978):

    G_i    = sum_t r_i,t                                      the episode's return
    R_i,t  = sum_{t' >= t} gamma^(t' - t) r_i,t'              the return from turn t on
    A^E_i  = (G_i - mean_group G) / (std_group G + eps)        the episode's advantage
    A^S_i,t = (R_i,t - mean_S R) / (std_S R + eps)             S: the turns played in the
                                                              same state, in the episode's
                                                              group (scope "group", GiGPO's)
                                                              or anywhere in the batch
                                                              (scope "batch"); or every
                                                              named turn of the batch,
                                                              whatever its state (scope
                                                              "all")
    A_i,t  = A^E_i + w * A^S_i,t

Turns played in the same state (EnvStep.turn_state: the board and the mark to move) share a
baseline: their returns differ only by what was played from there. A state seen once in its
scope, or one whose returns are all equal, contributes A^S = 0. With gamma = 0 the step
term compares only the turns' own rewards (an env that scores each move: a bandit per
state); with gamma = 1 it compares everything that followed. Scope "all" is for envs whose
per-move reward already says whether a move was good, whatever the state (a game scoring
each move by its minimax value): one baseline for every turn, so that a state the policy
always plays alike, where a per-state baseline gives A^S = 0, still has a bad move pushed
down. Every token of turn t carries A_i,t (the learner's gspo_token or grpo loss takes
per-token advantages).

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


def _normalised(values: np.ndarray, eps: float, scale: str = "std") -> np.ndarray:
    """(v - mean) / (std + eps) (scale "std"; population std) or v - mean (scale "none"),
    exact zeros when all values are equal."""
    if len(values) < 2 or np.all(values == values[0]):
        return np.zeros_like(values)
    centred = values - values.mean()
    return centred / (values.std() + eps) if scale == "std" else centred


SCOPES = ("group", "batch", "all")
ADVANTAGE_SCALES = ("std", "none")  # learner.advantage.scale


def _same_state_turns(turn_states: Sequence[Sequence[str | None]], group_size: int,
                      scope: str) -> list[list[tuple[int, int]]]:
    """The (episode, turn) indices of the turns played in each state, per scope: each group
    of `group_size` consecutive episodes, or the whole batch; with scope "all" one list of
    every named turn of the batch. Unnamed turns are left out."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, not {scope!r}")
    span = group_size if scope == "group" else max(len(turn_states), 1)
    out: list[list[tuple[int, int]]] = []
    for g in range(0, len(turn_states), span):
        same_state: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for i in range(g, min(g + span, len(turn_states))):
            for t, state in enumerate(turn_states[i]):
                if state is not None:
                    same_state["" if scope == "all" else state].append((i, t))
        out.extend(same_state.values())
    return out


def turn_advantages(turn_rewards: Sequence[Sequence[float]],
                    turn_states: Sequence[Sequence[str | None]], group_size: int,
                    step_weight: float, eps: float, gamma: float = 1.0,
                    scope: str = "group", scale: str = "std") -> list[np.ndarray]:
    """A_i,t (module docstring) for every episode i of a batch whose groups are consecutive,
    `group_size` episodes each; one float32 array of turn advantages per episode. A turn
    without a state name (None) gets only the episode advantage. scale "none" leaves out
    both divisions by a std (arl.gspo.group_advantages says why)."""
    if len(turn_rewards) % group_size or len(turn_states) != len(turn_rewards):
        raise ValueError("episodes must come in whole groups, with a state list each")
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"scale must be one of {ADVANTAGE_SCALES}, not {scale!r}")
    returns = [returns_to_go(r, gamma) for r in turn_rewards]
    totals = np.array([float(np.sum(r)) for r in turn_rewards])
    episode = [_normalised(totals[g:g + group_size], eps, scale)
               for g in range(0, len(totals), group_size)]
    step = [np.zeros(len(r)) for r in returns]
    for turns in _same_state_turns(turn_states, group_size, scope):
        values = _normalised(np.array([returns[i][t] for i, t in turns]), eps, scale)
        for (i, t), v in zip(turns, values, strict=True):
            step[i][t] = v
    return [(episode[i // group_size][i % group_size] + step_weight * step[i]).astype(np.float32)
            for i in range(len(step))]


def shared_turn_share(turn_states: Sequence[Sequence[str | None]], group_size: int,
                      scope: str) -> float:
    """The share of named turns whose state another turn of their scope was played in too:
    the turns that a per-state baseline can teach something (scope "all": as "batch")."""
    scope = "batch" if scope == "all" else scope
    sizes = [len(turns) for turns in _same_state_turns(turn_states, group_size, scope)]
    named = sum(sizes)
    return sum(n for n in sizes if n > 1) / named if named else 0.0


def nonzero_step_share(turn_rewards: Sequence[Sequence[float]],
                       turn_states: Sequence[Sequence[str | None]], group_size: int,
                       gamma: float, scope: str) -> float:
    """The share of named turns whose step advantage A^S is not zero: the turns from which
    the step term teaches something (a state seen once, or whose returns all agree, gives 0)."""
    returns = [returns_to_go(r, gamma) for r in turn_rewards]
    nonzero = named = 0
    for turns in _same_state_turns(turn_states, group_size, scope):
        values = _normalised(np.array([returns[i][t] for i, t in turns]), 0.0)
        nonzero += int(np.count_nonzero(values))
        named += len(turns)
    return nonzero / named if named else 0.0
