"""Tic-tac-toe rules and the perfect minimax, checked by exhaustive search of the game tree."""

import functools
import random

import pytest

from arl.envs import tictactoe_rules as rules
from arl.envs.opponents import MinimaxOpponent
from arl.envs.tictactoe_rules import EMPTY_BOARD, best_moves, is_terminal, legal_moves, other, play


def _board(text: str) -> rules.Board:
    """'X.O......' -> a board (row by row)."""
    return tuple(text)


def _reachable() -> set[rules.Board]:
    """Every position reachable from the empty board with X first, terminal ones included."""
    seen, stack = {EMPTY_BOARD}, [EMPTY_BOARD]
    while stack:
        board = stack.pop()
        for m in legal_moves(board):
            child = play(board, m, rules.to_move(board))
            if child not in seen:
                seen.add(child)
                stack.append(child)
    return seen


@functools.lru_cache(maxsize=None)
def _worst_case(board: rules.Board, me: str, turn: str) -> int:
    """The worst result for `me` when `me` may play ANY of its best moves and the other side
    plays every legal reply: an exhaustive check that no best move ever loses ground."""
    won = rules.winner(board)
    if won is not None:
        return 1 if won == me else -1
    if rules.is_full(board):
        return 0
    moves = best_moves(board, me) if turn == me else legal_moves(board)
    return min(_worst_case(play(board, m, turn), me, other(turn)) for m in moves)


def test_reachable_position_count_is_the_known_5478():
    assert len(_reachable()) == 5478


def test_winner_lines_and_legal_moves():
    assert rules.winner(_board("XXX.OO...")) == "X"
    assert rules.winner(_board("O..O..O.X")) == "O"
    assert rules.winner(_board("X.O.XO..X")) == "X"
    assert rules.winner(_board("..O.O.O.X")) == "O"
    assert rules.winner(_board("XOX......")) is None
    assert legal_moves(_board("XXX.OO...")) == ()  # game over: nothing is legal
    assert legal_moves(_board("X...O....")) == (2, 3, 4, 6, 7, 8, 9)
    assert rules.occupied_squares(_board("X...O....")) == (1, 5)


def test_play_rejects_taken_squares():
    board = play(EMPTY_BOARD, 5, "X")
    assert board[4] == "X"
    try:
        play(board, 5, "O")
    except ValueError:
        pass
    else:
        raise AssertionError("playing a taken square must raise")


def test_render_shows_numbers_on_empty_squares():
    assert rules.render(_board("X.O.X...O")) == "X|2|O\n4|X|6\n7|8|O"
    assert rules.render(_board("X.O.X...O"), "lists") == "X: 1 5\nO: 3 9\nfree: 2 4 6 7 8"
    assert rules.render(_board("........."), "lists") == "X: -\nO: -\nfree: 1 2 3 4 5 6 7 8 9"
    with pytest.raises(ValueError):
        rules.render(_board("........."), "ascii")


def test_minimax_never_loses_from_the_empty_board_as_either_mark():
    assert _worst_case(EMPTY_BOARD, "X", "X") == 0
    assert _worst_case(EMPTY_BOARD, "O", "X") == 0


def test_minimax_secures_the_game_value_from_every_reachable_position():
    for board in _reachable():
        if is_terminal(board):
            continue
        player = rules.to_move(board)
        value = rules.value(board, player)
        assert _worst_case(board, player, player) == value, board
        if value >= 0:  # not already lost: best play never loses
            assert _worst_case(board, player, player) >= 0


def test_minimax_vs_minimax_always_draws():
    @functools.lru_cache(maxsize=None)
    def outcomes(board: rules.Board) -> frozenset:
        if is_terminal(board):
            return frozenset({rules.winner(board)})
        player = rules.to_move(board)
        return frozenset().union(*(outcomes(play(board, m, player))
                                   for m in best_moves(board, player)))

    assert outcomes(EMPTY_BOARD) == frozenset({None})
    opponent = MinimaxOpponent(rules.best_moves, rules.winning_moves)
    for seed in range(20):
        rng, board = random.Random(seed), EMPTY_BOARD
        while not is_terminal(board):
            board = play(board, opponent.choose(board, rules.to_move(board), rng),
                         rules.to_move(board))
        assert rules.winner(board) is None


def test_best_moves_include_every_immediate_win():
    board = _board("XX.OO....")  # X to move can win at 3; O threatens 6
    assert rules.winning_moves(board, "X") == (3,)
    assert 3 in best_moves(board, "X") and rules.value(board, "X") == 1
    assert rules.winning_moves(board, "O") == (6,) and 6 in best_moves(board, "O")
    # Not taking the win and not blocking 6 throws the won game away.
    assert 7 not in best_moves(board, "X")


def test_symmetry_classes_and_the_held_out_tenth():
    from arl.envs.tictactoe_positions import reachable

    boards = reachable()
    assert len(boards) == 4520  # every non-terminal position reachable from the empty board
    classes = {rules.canonical(b) for b in boards}
    assert len(classes) == 627
    corner = tuple("X........")
    assert {rules.canonical(tuple(corner[i] for i in s)) for s in rules.SYMMETRIES} == {
        rules.canonical(corner)}
    held = {c for c in classes if rules.held_out(tuple(c))}
    assert 0.08 < len(held) / len(classes) < 0.14
    for board in boards:  # a class is held out whole, in every orientation
        assert rules.held_out(board) == (rules.canonical(board) in held)
