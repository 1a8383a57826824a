"""Self-play: a frozen snapshot of the policy plays the opponent (`env.opponent: policy`).

The snapshot is a copy of the model in the rollout worker, refreshed with the policy's
weights every `SelfPlay.refresh_every` versions. Asked to move, it gets a prompt (what the
agent would be asked in the opponent's seat, built by the env) and the well-formed call of
every legal move, scores all calls in one batched forward pass, and samples one from those
scores at the rollout temperature with the env's random generator, so games stay
reproducible. Scores are cached per (prompt, calls) until the next refresh: many positions
recur across the games of a step. The env turns this chooser into its own opponent
(`arl.env_spec.SelfPlay.opponent`).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from arl.episode import ChatRenderer
from arl.model.causal_lm import load_model, token_logprobs
from arl.rollout.engines.stops import end_of_turn_id
from arl.rollout.engines.weights import as_tensor, complete_tied, tied_groups
from arl.tools import format_tool_call
from arl.types import EnvReset, ToolCall


class SnapshotPolicy:
    """`choose(prompt, calls, rng) -> index`: the frozen policy's pick among `calls`."""

    def __init__(self, model_path: str, temperature: float):
        self.model, tokenizer = load_model(model_path, "float32")
        self.renderer = ChatRenderer(tokenizer, stop_token=tokenizer.eos_token)
        self.temperature = temperature
        self.stop_id = end_of_turn_id(tokenizer)
        self.pad_id = tokenizer.pad_token_id or 0
        self.version = 0
        self._aliases = tied_groups(self.model)
        self._scores: dict[tuple, list[float]] = {}

    def load(self, weights: Mapping[str, Any], version: int) -> None:
        """Take the policy's weights (`version`) as the new snapshot."""
        state = complete_tied({k: as_tensor(v) for k, v in weights.items()}, self._aliases)
        with torch.no_grad():
            self.model.load_state_dict(state, strict=True)
        self.version = version
        self._scores.clear()

    def choose(self, prompt: EnvReset, calls: Sequence[ToolCall], rng: random.Random) -> int:
        """The index of the call the snapshot makes after `prompt`, sampled at its
        temperature (the likeliest at 0) from the calls' log-probabilities."""
        scores = self.scores(prompt, calls)
        if self.temperature == 0:
            return max(range(len(calls)), key=lambda i: scores[i])
        top = max(scores)
        weights = [float(torch.exp(torch.tensor((s - top) / self.temperature))) for s in scores]
        return rng.choices(range(len(calls)), weights=weights)[0]

    @torch.no_grad()
    def scores(self, prompt: EnvReset, calls: Sequence[ToolCall]) -> list[float]:
        """Log-probability of replying with exactly each call (and the stop) after `prompt`."""
        ids = self.renderer.prompt_ids(prompt)
        key = (tuple(ids), tuple(format_tool_call(c) for c in calls))
        if key not in self._scores:
            self._scores[key] = self._score(ids, key[1])
        return self._scores[key]

    def _score(self, prompt: list[int], texts: Sequence[str]) -> list[float]:
        replies = [self.renderer.encode(t) + [self.stop_id] for t in texts]
        width = len(prompt) + max(len(r) for r in replies)
        ids = torch.full((len(replies), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, reply in enumerate(replies):
            ids[row, : len(prompt) + len(reply)] = torch.tensor(prompt + reply)
            mask[row, : len(prompt) + len(reply)] = 1
        logprobs = token_logprobs(self.model, ids, mask, temperature=1.0)  # [calls, T]
        return [float(logprobs[row, len(prompt): len(prompt) + len(replies[row])].sum())
                for row in range(len(replies))]
