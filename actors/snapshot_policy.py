"""Self-play: a frozen snapshot of the policy plays the opponent in full games
(`env.opponent: policy`).

The snapshot is a copy of the model in the rollout worker, refreshed with the policy's
weights every `env.opponent_refresh_every` versions. On its move it is asked what the agent
is asked at the start of a game (`envs.game_env.position_prompt`, for the opponent's mark on
the current board) and scores, in one batched forward pass, the well-formed call on every
legal move; it then samples a move from those scores at the rollout temperature, with the
env's random generator, so games stay reproducible. Scores are cached per (board, mark)
until the next refresh: many positions recur across the games of a step.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

import torch

from actors.engines.stops import end_of_turn_id
from actors.engines.weights import as_tensor, complete_tied, tied_groups
from arl.episode import ChatRenderer
from arl.tools import format_tool_call
from arl.types import ToolCall
from envs.config import FullGameConfig
from envs.game_env import Board, GameSpec, position_prompt
from learner.model import load_model, token_logprobs


class SnapshotPolicy:
    """The callable behind an `envs.opponents.PolicyOpponent`: (board, mark, rng) -> move."""

    def __init__(self, model_path: str, spec: GameSpec, env: FullGameConfig, temperature: float):
        self.model, tokenizer = load_model(model_path, "float32")
        self.renderer = ChatRenderer(tokenizer, stop_token=tokenizer.eos_token)
        self.spec, self.env, self.temperature = spec, env, temperature
        self.refresh_every = env.opponent_refresh_every  # versions between loads
        self.stop_id = end_of_turn_id(tokenizer)
        self.pad_id = tokenizer.pad_token_id or 0
        self.version = 0
        self._aliases = tied_groups(self.model)
        self._scores: dict[tuple[Board, str], dict[int, float]] = {}

    def load(self, weights: Mapping[str, Any], version: int) -> None:
        """Take the policy's weights (`version`) as the new snapshot."""
        state = complete_tied({k: as_tensor(v) for k, v in weights.items()}, self._aliases)
        with torch.no_grad():
            self.model.load_state_dict(state, strict=True)
        self.version = version
        self._scores.clear()

    def __call__(self, board: Board, player: str, rng: random.Random) -> int | None:
        scores = self._scores.get((board, player))
        if scores is None:
            scores = self._scores[(board, player)] = self._score(board, player)
        if not scores:
            return None
        moves = sorted(scores)
        if self.temperature == 0:
            return max(moves, key=lambda m: scores[m])
        top = max(scores.values())
        weights = [float(torch.exp(torch.tensor((scores[m] - top) / self.temperature)))
                   for m in moves]
        return rng.choices(moves, weights=weights)[0]

    @torch.no_grad()
    def _score(self, board: Board, player: str) -> dict[int, float]:
        """Log-probability of the well-formed call on each legal move."""
        moves = self.spec.legal_moves(board)
        if not moves:
            return {}
        prompt = self.renderer.prompt_ids(position_prompt(self.spec, self.env, board, player))
        calls = [self.renderer.encode(format_tool_call(ToolCall(
            self.spec.tool.name, {self.spec.arg: m}))) + [self.stop_id] for m in moves]
        width = len(prompt) + max(len(c) for c in calls)
        ids = torch.full((len(moves), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, call in enumerate(calls):
            ids[row, : len(prompt) + len(call)] = torch.tensor(prompt + call)
            mask[row, : len(prompt) + len(call)] = 1
        logprobs = token_logprobs(self.model, ids, mask, temperature=1.0)  # [moves, T]
        return {m: float(logprobs[row, len(prompt): len(prompt) + len(calls[row])].sum())
                for row, m in enumerate(moves)}
