"""Which start states a step plays: a pure function of the config and the step, so that sync
mode, async mode and a resumed run all play the same groups."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from arl.config import Config


@dataclass(frozen=True)
class StartStates:
    """The groups of one step: their env seeds and group ids."""

    env_seeds: list[int]
    group_ids: list[int]

    def extended(self, more: StartStates, k: int) -> StartStates:
        """These groups, then the first `k` of `more`."""
        return StartStates(self.env_seeds + more.env_seeds[:k],
                           self.group_ids + more.group_ids[:k])


def start_states(cfg: Config, step: int, round: int = 0) -> StartStates:
    """Distinct, reproducible start states for every group of every step. Round r > 0 is the
    r-th extra set of `groups_per_step` a step plays under dynamic sampling: its own seeds,
    and group ids after every id a first round can have, so ids stay unique in the run."""
    n = cfg.rollout.groups_per_step
    if round == 0:
        ids = [step * n + g for g in range(n)]
        entropy = [cfg.seed, step]
    else:
        extra = step * cfg.rollout.max_resample_rounds + round - 1
        ids = [(cfg.steps + extra) * n + g for g in range(n)]
        entropy = [cfg.seed, step, round]
    seeds = np.random.SeedSequence(entropy).generate_state(n, dtype=np.uint32)
    return StartStates([int(s) for s in seeds], ids)


def transcripts_wanted(cfg: Config, step: int) -> int:
    """How many groups of `step` bring a decoded conversation (`wandb.samples` every
    `wandb.samples_every` steps)."""
    every = cfg.wandb.samples_every
    return cfg.wandb.samples if every and step % every == 0 else 0
