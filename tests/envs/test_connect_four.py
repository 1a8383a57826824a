"""Connect-four rules, its alpha-beta opponent, and the env (small search depths: fast)."""

import pytest

from arl.envs import connect_four_rules as rules
from arl.envs.connect_four_rules import COLS, EMPTY_BOARD, ROWS
from arl.envs.opponents import PolicyOpponent
from arl.envs.registry import env_config, make_env
from arl.types import ToolCall


def _drops(*moves: tuple[int, str]) -> rules.Board:
    board = EMPTY_BOARD
    for column, mark in moves:
        board = rules.play(board, column, mark)
    return board


def _cell(board, row_from_bottom: int, column: int) -> str:
    return board[(ROWS - 1 - row_from_bottom) * COLS + column - 1]


def test_gravity_stacks_pieces_from_the_bottom():
    board = _drops((3, "X"), (3, "O"), (5, "X"))
    assert _cell(board, 0, 3) == "X" and _cell(board, 1, 3) == "O" and _cell(board, 0, 5) == "X"
    assert sum(cell != rules.EMPTY for cell in board) == 3


def test_full_column_is_illegal():
    board = _drops(*[(2, "XO"[i % 2]) for i in range(ROWS)])
    assert 2 not in rules.legal_moves(board)
    assert rules.landing_index(board, 2) is None
    with pytest.raises(ValueError):
        rules.play(board, 2, "X")


def test_four_in_a_row_in_every_direction():
    horizontal = _drops((1, "X"), (2, "X"), (3, "X"))
    assert rules.winner(horizontal) is None
    assert rules.winner(rules.play(horizontal, 4, "X")) == "X"
    vertical = _drops(*[(7, "O")] * 4)
    assert rules.winner(vertical) == "O"
    # Rising diagonal X at (col 1,row 0), (2,1), (3,2), (4,3), propped up by O pieces.
    rising = _drops((1, "X"), (2, "O"), (2, "X"), (3, "O"), (3, "O"), (3, "X"),
                    (4, "O"), (4, "O"), (4, "O"))
    assert rules.winner(rising) is None
    assert rules.winner(rules.play(rising, 4, "X")) == "X"
    falling = _drops((7, "X"), (6, "O"), (6, "X"), (5, "O"), (5, "O"), (5, "X"),
                     (4, "O"), (4, "O"), (4, "O"))
    assert rules.winner(rules.play(falling, 4, "X")) == "X"
    assert rules.legal_moves(rules.play(falling, 4, "X")) == ()  # game over


def test_full_board_without_four_is_a_draw():
    # Columns alternate, and every two rows the pattern flips: no line of four anywhere.
    board = tuple("XO"[((r // 2) + c) % 2] for r in range(ROWS) for c in range(COLS))
    assert rules.is_full(board) and rules.winner(board) is None
    assert rules.legal_moves(board) == ()


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_minimax_takes_an_immediate_win(depth):
    board = _drops((1, "X"), (1, "O"), (2, "X"), (2, "O"), (3, "X"), (3, "O"))
    assert rules.best_moves(board, "X", depth) == (4,)


@pytest.mark.parametrize("depth", [2, 3, 4])
def test_minimax_blocks_an_immediate_loss(depth):
    horizontal = _drops((1, "O"), (1, "X"), (2, "O"), (2, "X"), (3, "O"), (6, "X"))
    assert rules.best_moves(horizontal, "X", depth) == (4,)
    vertical = _drops((7, "O"), (7, "O"), (7, "O"), (1, "X"), (2, "X"))
    assert rules.best_moves(vertical, "X", depth) == (7,)


def test_env_full_game_against_minimax_and_rewards():
    cfg = env_config(name="connect_four", opponent="minimax", search_depth=2)
    env = make_env(cfg)
    reset = env.reset(0)
    assert [t.name for t in reset.tools] == ["drop_piece"]
    assert reset.messages[1].content.endswith(f"1 2 3 4 5 6 7\nYou are {env.agent}. Your move.")
    step = None
    while step is None or not step.terminated:  # always column 1, then the lowest open one
        step = env.step(ToolCall("drop_piece", {"column": rules.legal_moves(env.board)[0]}))
    assert step.outcome.kind == "loss" and step.reward == -1.0
    assert step.outcome.actions[0] == 1


def test_env_refuses_a_full_column():
    cfg = env_config(name="connect_four", opponent="random", invalid_action="retry")
    env = make_env(cfg)
    env.reset(0)
    while 1 in rules.legal_moves(env.board):
        env.step(ToolCall("drop_piece", {"column": 1}))
    step = env.step(ToolCall("drop_piece", {"column": 1}))
    assert step.outcome is None and not step.terminated
    assert step.messages[0].content.startswith("Illegal move: column 1 is full.")


def test_env_win_as_either_mark():
    def spread_out(board, player, rng):  # columns 1, 2, 3, 5: never four of its own
        return (1, 2, 3, 5)[sum(cell == player for cell in board)]

    opponent = PolicyOpponent(spread_out, rules.legal_moves)
    cfg = env_config(name="connect_four", opponent="policy")
    env = make_env(cfg, opponent)
    agents = set()
    for seed in range(4):
        env.reset(seed)
        agents.add(env.agent)
        steps = [env.step(ToolCall("drop_piece", {"column": 4})) for _ in range(4)]
        assert [s.terminated for s in steps] == [False, False, False, True]
        assert steps[-1].reward == 1.0 and steps[-1].outcome.kind == "win"
        assert steps[-1].outcome.actions == (4, 4, 4, 4)
    assert agents == {"X", "O"}
