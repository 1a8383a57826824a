"""Reference players, played through the envs and scored as the model is: perfect play
scores the most on the one-move table and never loses a game; a random legal player never
makes an illegal move; an env without a perfect player says so."""

from __future__ import annotations

import numpy as np
import pytest

from arl.envs.registry import env_config
from arl.rollout.evaluation import read_positions
from arl.rollout.reference import play_reference, reference_positions


def test_perfect_beats_random_on_the_move_table_and_neither_is_illegal():
    cfg = env_config("tictactoe_move", min_marks=0, max_marks=8)
    random_ = play_reference(cfg, "random", 2000, seed=5)
    perfect = play_reference(cfg, "perfect", 2000, seed=5)
    assert all(p.outcome.kind in ("legal", "best", "win") for p in random_ + perfect)
    assert all(p.outcome.kind in ("best", "win") for p in perfect)
    # The table's reference points on boards with 0-8 marks: 0.485 and 0.850.
    assert abs(np.mean([p.reward for p in random_]) - 0.485) < 0.03
    assert abs(np.mean([p.reward for p in perfect]) - 0.850) < 0.01


def test_perfect_never_loses_a_game_and_finds_every_win_in_one():
    for seat in ("X", "O"):
        cfg = env_config("tictactoe", opponent="minimax", seat=seat)
        games = play_reference(cfg, "perfect", 50, seed=1)
        assert {g.outcome.result for g in games} == {"draw"}
    rows = read_positions("configs/positions/win_in_one.jsonl")
    rates = reference_positions(env_config("tictactoe_move"), rows, "perfect", seed=0)
    assert rates["accuracy"].rate == 1.0 and rates["illegal"].count == 0
    random_ = reference_positions(env_config("tictactoe_move"), rows, "random", seed=0)
    assert 0.3 < random_["accuracy"].rate < 0.7


def test_unknown_players_and_envs_without_one_are_refused():
    with pytest.raises(ValueError, match="reference player must be one of"):
        play_reference(env_config("tictactoe_move"), "genius", 1, seed=0)
    with pytest.raises(ValueError, match="no perfect player"):
        play_reference(env_config("connect_four"), "perfect", 1, seed=0)
