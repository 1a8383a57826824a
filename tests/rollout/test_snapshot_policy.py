"""Self-play (`env.opponent: policy`): a frozen snapshot of the policy plays the opponent,
refreshed every `env.opponent_refresh_every` versions, and a run trains against it on Ray."""

from __future__ import annotations

import random

import numpy as np

from arl.envs import tictactoe_rules as rules
from arl.envs.game_env import position_prompt
from arl.envs.registry import board_policy, env_config, game_spec
from arl.rollout.snapshot_policy import SnapshotPolicy
from arl.types import ToolCall


def _board_calls(board):
    return [ToolCall("choose_square", {"square": m}) for m in rules.legal_moves(board)]


def test_the_snapshot_plays_legal_moves_reproducibly(warm_model_dir):
    cfg = env_config(name="tictactoe", opponent="policy")
    policy = SnapshotPolicy(warm_model_dir, temperature=1.0)
    opponent = board_policy(game_spec("tictactoe"), cfg, policy.choose)
    board = tuple("X...O....")
    moves = [opponent.choose(board, "X", random.Random(s)) for s in range(30)]
    assert set(moves) <= set(rules.legal_moves(board)) and opponent.fallback_count == 0
    assert moves == [opponent.choose(board, "X", random.Random(s)) for s in range(30)]
    assert len(set(moves)) > 1  # sampled at temperature 1
    prompt = position_prompt(game_spec("tictactoe"), cfg, board, "X")
    scores = policy.scores(prompt, _board_calls(board))
    assert len(scores) == len(rules.legal_moves(board)) and all(v < 0 for v in scores)
    greedy = SnapshotPolicy(warm_model_dir, temperature=0.0)
    best = rules.legal_moves(board)[max(range(len(scores)), key=scores.__getitem__)]
    assert board_policy(game_spec("tictactoe"), cfg, greedy.choose).choose(
        board, "X", random.Random(0)) == best


def test_a_refresh_loads_new_weights_and_forgets_old_scores(warm_model_dir):
    cfg = env_config(name="tictactoe", opponent="policy")
    policy = SnapshotPolicy(warm_model_dir, temperature=1.0)
    board = tuple("XO.......")
    prompt = position_prompt(game_spec("tictactoe"), cfg, board, "X")
    before = policy.scores(prompt, _board_calls(board))
    weights = {k: v.detach().numpy() * 0.5 for k, v in policy.model.state_dict().items()}
    policy.load(weights, version=10)
    assert policy.version == 10 and not policy._scores
    after = policy.scores(prompt, _board_calls(board))
    assert not np.allclose(before, after)


def test_self_play_trains_on_ray(tmp_path, warm_model_dir):
    from arl.app.train import train
    from tests.builders import ci_config, metrics_rows

    cfg = ci_config(warm_model_dir, tmp_path, "env.name=tictactoe", "env.opponent=policy",
                    "env.opponent_refresh_every=2", "rollout.max_turns=5", "steps=3")
    train(cfg)
    rows = metrics_rows(tmp_path / "ci")
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows:  # every game ended one way or another against the snapshot
        total = sum(row[f"game/{k}_rate"] for k in ("win", "draw", "loss", "illegal"))
        assert abs(total - 1.0) < 1e-9 and row["rollout/failed_episodes"] == 0
