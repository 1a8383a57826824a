"""The one-move task's reward table, one entry at a time, on boards picked by seed."""

from collections.abc import Callable

import pytest

from arl.envs import tictactoe_rules as rules
from arl.envs.registry import env_config, make_env
from arl.envs.tictactoe_move import (
    MAX_OPENING_MOVES,
    MIN_OPENING_MOVES,
    TicTacToeMoveEnv,
    opening_board,
)
from arl.types import Outcome, ToolCall, ToolCallError, ToolCallErrorKind


def _call(square) -> ToolCall:
    return ToolCall("choose_square", {"square": square})


def _env_where(pred: Callable[[rules.Board, str], bool], cfg=None):
    """A reset env whose board satisfies pred(board, agent), searching seeds in order."""
    env = TicTacToeMoveEnv(cfg or env_config())
    for seed in range(5000):
        env.reset(seed)
        if pred(env.board, env.agent):
            return env
    raise AssertionError("no seed gives such a board")


def _best_not_win(board, agent):
    return sorted(set(rules.best_moves(board, agent)) - set(rules.winning_moves(board, agent)))


def _not_best(board, agent):
    return sorted(set(rules.legal_moves(board)) - set(rules.best_moves(board, agent)))


def test_reset_prompt_text_and_tool():
    env = make_env(env_config(name="tictactoe_move", board_format="grid"))
    reset = env.reset(1)
    assert [m.role for m in reset.messages] == ["system", "user"]
    assert reset.messages[0].content == (
        "You play tic-tac-toe as O. Reply with one choose_square tool call."
    )
    assert reset.messages[1].content == "X|X|3\n4|5|O\n7|8|9\nYou are O. Your move."
    assert [t.name for t in reset.tools] == ["choose_square"]
    assert env.reset(1) == reset
    lists = make_env(env_config(name="tictactoe_move")).reset(1)  # the default format
    assert lists.messages[1].content == "X: 1 2\nO: 6\nfree: 3 4 5 7 8 9\nYou are O. Your move."


def test_boards_are_live_with_the_agent_to_move_and_both_marks_occur():
    agents, sizes = set(), set()
    for seed in range(300):
        board = opening_board(seed)
        assert not rules.is_terminal(board)
        agents.add(rules.to_move(board))
        sizes.add(len(rules.occupied_squares(board)))
    assert agents == {"X", "O"}
    assert sizes == set(range(MIN_OPENING_MOVES, MAX_OPENING_MOVES + 1))


def test_immediate_win_scores_reward_win():
    env = _env_where(lambda b, a: bool(rules.winning_moves(b, a)))
    square = rules.winning_moves(env.board, env.agent)[0]
    step = env.step(_call(square))
    assert step.reward == 1.0 and step.terminated
    assert step.outcome == Outcome("win", "win", (square,))


def test_best_move_scores_reward_best():
    env = _env_where(lambda b, a: bool(_best_not_win(b, a)))
    square = _best_not_win(env.board, env.agent)[0]
    step = env.step(_call(square))
    assert step.reward == 0.8 and step.outcome == Outcome("best", None, step.outcome.actions)


def test_legal_but_not_best_scores_reward_legal():
    env = _env_where(lambda b, a: bool(_not_best(b, a)))
    square = _not_best(env.board, env.agent)[0]
    step = env.step(_call(square))
    assert step.reward == 0.0 and step.outcome == Outcome("legal", None, (square,))


def test_occupied_square_scores_reward_invalid():
    env = _env_where(lambda b, a: bool(rules.occupied_squares(b)))
    square = rules.occupied_squares(env.board)[0]
    step = env.step(_call(square))
    assert step.reward == -1.0 and step.terminated
    assert step.outcome == Outcome("illegal_move", "invalid", (square,))
    assert "taken" in step.messages[0].content


@pytest.mark.parametrize("kind", list(ToolCallErrorKind))
def test_every_tool_call_error_scores_reward_invalid(kind):
    env = make_env(env_config(name="tictactoe_move"))
    env.reset(0)
    step = env.step(ToolCallError(kind, "bad turn"))
    assert step.reward == -1.0 and step.terminated
    assert step.outcome == Outcome("invalid_call", "invalid", ())
    assert step.messages[0].role == "tool" and kind.value in step.messages[0].content


@pytest.mark.parametrize("call, kind", [
    (ToolCall("drop_piece", {"square": 5}), "unknown_tool"),
    (_call(0), "invalid_arguments"),
    (_call(10), "invalid_arguments"),
    (_call("5"), "invalid_arguments"),
    (_call(True), "invalid_arguments"),
    (ToolCall("choose_square", {"square": 5, "mark": "X"}), "invalid_arguments"),
    (ToolCall("choose_square", {}), "invalid_arguments"),
])
def test_calls_outside_the_schema_are_invalid_calls(call, kind):
    env = TicTacToeMoveEnv(env_config())
    env.reset(0)  # the empty board: every square in range would be legal
    step = env.step(call)
    assert step.reward == -1.0
    assert step.outcome == Outcome("invalid_call", "invalid", ())
    assert f"({kind})" in step.messages[0].content


def test_rewards_come_from_the_config():
    cfg = env_config(reward_best=0.5, reward_legal=0.1, reward_invalid=-2.0, reward_win=3.0)
    for choose, reward in [
        (_best_not_win, 0.5),
        (_not_best, 0.1),
        (lambda b, a: list(rules.winning_moves(b, a)), 3.0),
        (lambda b, a: list(rules.occupied_squares(b)), -2.0),
    ]:
        env = _env_where(lambda b, a, choose=choose: bool(choose(b, a)), cfg)
        assert env.step(_call(choose(env.board, env.agent)[0])).reward == reward


def test_one_move_per_episode():
    env = TicTacToeMoveEnv(env_config())
    with pytest.raises(RuntimeError):
        env.step(_call(5))
    env.reset(3)
    env.step(_call(rules.legal_moves(env.board)[0]))
    with pytest.raises(RuntimeError):
        env.step(_call(5))


def test_a_random_legal_move_averages_about_plus_0_47():
    """The table's baseline that the warm-start mix is tuned against (docs/ARCHITECTURE.md,
    Lessons)."""
    total = 0.0
    for seed in range(2000):
        board = opening_board(seed)
        agent = rules.to_move(board)
        wins, best = rules.winning_moves(board, agent), rules.best_moves(board, agent)
        moves = rules.legal_moves(board)
        total += sum(1.0 if m in wins else 0.8 if m in best else 0.0 for m in moves) / len(moves)
    assert 0.42 < total / 2000 < 0.52
