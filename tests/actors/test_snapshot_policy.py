"""Self-play (`env.opponent: policy`): a frozen snapshot of the policy plays the opponent,
refreshed every `env.opponent_refresh_every` versions, and a run trains against it on Ray."""

from __future__ import annotations

import random

import numpy as np

from actors.snapshot_policy import SnapshotPolicy
from envs import tictactoe_rules as rules
from envs.registry import env_config, game_spec


def test_the_snapshot_plays_legal_moves_reproducibly(warm_model_dir):
    cfg = env_config(name="tictactoe", opponent="policy")
    policy = SnapshotPolicy(warm_model_dir, game_spec("tictactoe"), cfg, temperature=1.0)
    board = tuple("X...O....")
    moves = [policy(board, "X", random.Random(s)) for s in range(30)]
    assert set(moves) <= set(rules.legal_moves(board))
    assert moves == [policy(board, "X", random.Random(s)) for s in range(30)]
    scores = policy._score(board, "X")
    assert set(scores) == set(rules.legal_moves(board)) and all(v < 0 for v in scores.values())
    greedy = SnapshotPolicy(warm_model_dir, game_spec("tictactoe"), cfg, temperature=0.0)
    assert greedy(board, "X", random.Random(0)) == max(scores, key=scores.get)


def test_a_refresh_loads_new_weights_and_forgets_old_scores(warm_model_dir):
    cfg = env_config(name="tictactoe", opponent="policy")
    policy = SnapshotPolicy(warm_model_dir, game_spec("tictactoe"), cfg, temperature=1.0)
    board = tuple("XO.......")
    before = policy._score(board, "X")
    policy(board, "X", random.Random(0))
    weights = {k: v.detach().numpy() * 0.5 for k, v in policy.model.state_dict().items()}
    policy.load(weights, version=10)
    assert policy.version == 10 and not policy._scores
    after = policy._score(board, "X")
    assert not np.allclose(list(before.values()), list(after.values()))


def test_self_play_trains_on_ray(tmp_path, warm_model_dir):
    from app.train import train
    from tests.builders import ci_config, metrics_rows

    cfg = ci_config(warm_model_dir, tmp_path, "env.name=tictactoe", "env.opponent=policy",
                    "env.opponent_refresh_every=2", "rollout.max_turns=5", "steps=3")
    train(cfg, use_ray=True)
    rows = metrics_rows(tmp_path / "ci")
    assert [r["step"] for r in rows] == [0, 1, 2]
    for row in rows:  # every game ended one way or another against the snapshot
        total = sum(row[f"game/{k}_rate"] for k in ("win", "draw", "loss", "illegal"))
        assert abs(total - 1.0) < 1e-9 and row["rollout/failed_episodes"] == 0
