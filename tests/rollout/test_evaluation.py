"""`arl eval`: counting and intervals checked with scripted policies through the real
episode loop, and the command end to end on a real tiny model and a real checkpoint."""

from __future__ import annotations

import json

import pytest

from arl.app.cli import main
from arl.envs import tictactoe_rules as rules
from arl.envs.opponents import parse_opponent
from arl.envs.registry import TICTACTOE_MOVE, env_config
from arl.rollout.evaluation import (
    Rate,
    play_games,
    read_positions,
    score_positions,
    wilson_interval,
)
from arl.types import SamplingParams
from tests.builders import ScriptedEngine

GREEDY = SamplingParams(0.0, 1.0, 48, 0)


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def _best(board, agent):
    return rules.best_moves(board, agent)[0]


def test_wilson_interval_matches_known_values():
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(20, 20) == pytest.approx((0.8389, 1.0), abs=1e-4)
    with pytest.raises(ValueError):
        wilson_interval(3, 2)


def test_perfect_play_draws_every_game_against_minimax(tokenizer):
    engine = ScriptedEngine(tokenizer, _best)
    rates = play_games(engine, env_config(name="tictactoe", opponent="minimax"), 10, 2, GREEDY)
    assert rates["draw"] == Rate(20, 20)
    assert rates["win"] == rates["loss"] == rates["illegal"] == Rate(0, 20)
    assert rates["draw"].as_dict()["ci95"] == [0.8389, 1.0]


def test_perfect_play_never_loses_to_random_and_malformed_calls_are_illegal(tokenizer):
    rates = play_games(ScriptedEngine(tokenizer, _best), env_config(name="tictactoe",
                       opponent="random"), 30, 1, GREEDY)
    assert rates["loss"].count == 0 and rates["win"].count > 10
    assert sum(r.count for r in rates.values()) == 30
    rates = play_games(ScriptedEngine(tokenizer, lambda b, a: None),
                       env_config(name="tictactoe",
                                  opponent=parse_opponent("eps_minimax:0.3").name),
                       6, 1, GREEDY)
    assert rates["illegal"] == Rate(6, 6)


def test_positions_are_scored_against_their_good_moves(tokenizer):
    positions = [
        {"board": "XX.OO....", "to_move": "X", "good_moves": [3]},  # X wins at 3
        {"board": "X...O....", "to_move": "X", "good_moves": [3, 7]},
        {"board": "XO.X.O...", "to_move": "X", "good_moves": [7]},
    ]
    cfg = env_config()
    first_empty = ScriptedEngine(tokenizer, lambda b, a: b.index(".") + 1)
    rates = score_positions(first_empty, cfg, positions, samples=2, params=GREEDY)
    assert rates["accuracy"] == Rate(2, 6)  # 3 is the first empty square only on the first
    occupied = ScriptedEngine(tokenizer, lambda b, a: b.index(a) + 1)
    rates = score_positions(occupied, cfg, positions, samples=1, params=GREEDY)
    assert rates["accuracy"] == Rate(0, 3) and rates["illegal"] == Rate(3, 3)


def test_bad_positions_and_opponents_are_refused_with_their_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"board": "X........", "to_move": "O", "good_moves": [5]}\n'
                    '{"board": "X........", "to_move": "O", "good_moves": [1]}\n')
    assert len(read_positions(str(path))) == 2  # JSON objects: the env reads what they hold
    with pytest.raises(ValueError, match=r"p.jsonl:2: good_moves \[1\] are not empty"):
        read_positions(str(path), lambda row: TICTACTOE_MOVE.position(env_config(), row))
    path.write_text("not json\n")
    with pytest.raises(ValueError, match="p.jsonl:1"):
        read_positions(str(path))
    for spec in ("eps_minimax:2", "eps_minimax:x", "eps_minimax", "alphazero"):
        with pytest.raises(ValueError, match="opponent must be"):
            parse_opponent(spec)
    assert parse_opponent("eps_minimax:0.3").epsilon == 0.3
    assert parse_opponent("eps:0.3") == parse_opponent("eps_minimax:0.3")  # older spelling


def _checkpoint(model_dir, path):
    from arl.model.causal_lm import load_model
    from arl.model.checkpoint.store import LearnerState, model_folder_files, save_checkpoint

    model, _ = load_model(model_dir, "float32")
    params = {n: p.detach() for n, p in model.named_parameters()}
    state = LearnerState(params, {"state": {}, "param_groups": []}, 7, 0)
    return save_checkpoint(path, state, 7, {"config": {"model": {"path": model_dir}}},
                           model_files=model_folder_files(model_dir))


def test_arl_eval_on_a_checkpoint_and_a_positions_file(tmp_path, warm_model_dir, capsys):
    ckpt = _checkpoint(warm_model_dir, tmp_path / "checkpoints" / "step_000007")
    for opponent in ("minimax", "random", "eps_minimax:0.3"):
        assert main(["eval", "--checkpoint", str(ckpt), "--opponent", opponent,
                     "--games", "4", "--max-new-tokens", "24"]) == 0
        last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
        assert last["games"] == 4 and last["opponent"] == opponent
        assert sum(last[k]["count"] for k in ("win", "draw", "loss", "illegal")) == 4
    positions = tmp_path / "positions.jsonl"
    positions.write_text('{"board": "XX.OO....", "to_move": "X", "good_moves": [3]}\n'
                         '{"board": "X...O....", "to_move": "X", "good_moves": [3, 7]}\n')
    assert main(["eval", "--checkpoint", warm_model_dir, "--positions", str(positions),
                 "--samples", "3", "--max-new-tokens", "24"]) == 0
    last = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert last["positions"] == 2 and last["samples"] == 3
    assert last["accuracy"]["count"] <= 6 and 0 <= last["accuracy"]["ci95"][0]
    assert main(["eval", "--checkpoint", warm_model_dir, "--opponent", "eps_minimax:7"]) == 2
