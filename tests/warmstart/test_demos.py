"""Warm-start demos: the configured mix, determinism, targets that mean what their kind says,
and a starting reward near -0.5 on the tictactoe_move table."""

from collections import Counter

import pytest

from arl.envs import tictactoe_rules as rules
from arl.envs.registry import env_config
from arl.envs.tictactoe_move import move_outcome, outcome_reward
from arl.tools import format_tool_call, parse_tool_call
from arl.types import ToolCall, ToolCallError
from arl.warmstart.demos import corpus_texts, game_examples, warmstart_examples
from tests.builders import read_board


def _board_of(demo) -> rules.Board:
    """Read the board back from the prompt, as the model has to."""
    board = read_board(demo.reset.messages[1].content)
    assert len(board) == 9
    return board


def _square_of(text: str) -> int | None:
    for square in range(1, 10):
        if text == format_tool_call(ToolCall("choose_square", {"square": square})):
            return square
    return None


@pytest.fixture(scope="module")
def demos():
    return warmstart_examples(env_config(), n=2000, seed=0, malformed_fraction=0.2,
                              illegal_fraction=0.45)


def test_fractions_are_as_configured(demos):
    counts = Counter(d.kind for d in demos)
    assert abs(counts["malformed"] / 2000 - 0.2) < 0.01
    assert abs(counts["illegal"] / 2000 - 0.45) < 0.01
    assert counts["legal"] + counts["illegal"] + counts["malformed"] == 2000


def test_deterministic_per_seed():
    a = warmstart_examples(env_config(), 50, 3, 0.2, 0.45)
    assert a == warmstart_examples(env_config(), 50, 3, 0.2, 0.45)
    assert a != warmstart_examples(env_config(), 50, 4, 0.2, 0.45)


def test_targets_name_the_intended_squares(demos):
    for demo in demos:
        board, square = _board_of(demo), _square_of(demo.target)
        if demo.kind == "legal":
            assert square in rules.legal_moves(board), demo
        elif demo.kind == "illegal":
            assert square in rules.occupied_squares(board), demo
        else:
            assert square is None, demo


def test_targets_parse_as_their_kind(demos):
    error_kinds = Counter()
    for demo in demos:
        parsed = parse_tool_call(demo.target, demo.reset.tools)
        if demo.kind == "malformed":
            assert isinstance(parsed, ToolCallError), demo.target
            error_kinds[parsed.kind] += 1
        else:
            assert parsed == ToolCall("choose_square", {"square": _square_of(demo.target)})
    assert len(error_kinds) >= 3  # a varied set of mistakes, not one


def test_legal_moves_are_random_not_strategic(demos):
    legal = [d for d in demos if d.kind == "legal"]
    outcomes = Counter(_outcome(d) for d in legal)
    assert outcomes["legal"] / len(legal) > 0.2  # minimax targets would never be merely legal


def _outcome(demo) -> str:
    board = _board_of(demo)
    return move_outcome(board, rules.to_move(board), _square_of(demo.target))


def test_starting_reward_is_about_minus_one_half(demos):
    """Score each target on the env's reward table: only legal targets escape -1."""
    cfg = env_config()
    total = sum(outcome_reward(_outcome(d) if d.kind == "legal" else "invalid_call", cfg)
                for d in demos)
    assert -0.6 < total / len(demos) < -0.4


def test_corpus_covers_all_three_envs():
    texts = corpus_texts(episodes=10, seed=0)
    assert texts == corpus_texts(episodes=10, seed=0)
    joined = "\n".join(texts)
    for needle in ("choose_square", "drop_piece", '"parameters"', "1 2 3 4 5 6 7", "free: ",
                   "You win.", "Game over.", "Try again", "Invalid tool call"):
        assert needle in joined, needle
    assert all(isinstance(t, str) and t for t in texts)


def _last_board(demo) -> rules.Board:
    """The board in the prompt's last message."""
    board = read_board(demo.reset.messages[-1].content)
    assert len(board) == 9
    return board


def test_game_examples_continue_real_games():
    cfg = env_config(name="tictactoe", opponent="random")
    demos = game_examples(cfg, 300, seed=1, malformed_fraction=0.3)
    assert demos == game_examples(cfg, 300, seed=1, malformed_fraction=0.3)
    assert Counter(d.kind for d in demos) == {"malformed": 90, "legal": 210}
    depths = Counter(len(d.reset.messages) for d in demos)
    assert depths[2] > 0 and max(depths) >= 6  # fresh games and games several turns in
    for demo in demos:
        roles = [m.role for m in demo.reset.messages]
        assert roles[:2] == ["system", "user"]
        assert roles[2:] == ["assistant", "tool"] * ((len(roles) - 2) // 2)
        for m in demo.reset.messages[2::2]:  # earlier calls are well formed
            assert isinstance(parse_tool_call(m.content, demo.reset.tools), ToolCall)
        board, square = _last_board(demo), _square_of(demo.target)
        assert not rules.is_terminal(board)
        if demo.kind == "legal":
            assert square in rules.legal_moves(board), demo
        else:
            assert isinstance(parse_tool_call(demo.target, demo.reset.tools), ToolCallError)
    with pytest.raises(ValueError, match="tictactoe only"):
        game_examples(env_config(), 1, 0, 0.0)
