"""Pure tic-tac-toe rules: no I/O, no randomness, no state.

A board is a tuple of 9 cells, row by row; a cell is "X", "O" or EMPTY. Squares are numbered
1-9 row by row everywhere outside this module's internals (text, tool arguments, opponents), so
`board[square - 1]` is the cell of `square`. X moves first on the boards the envs build, but the
search functions take the player to move explicitly and never assume it.
"""

from __future__ import annotations

import functools
import hashlib

EMPTY = "."
MARKS = ("X", "O")
Board = tuple[str, ...]

EMPTY_BOARD: Board = (EMPTY,) * 9
LINES = (
    (0, 1, 2), (3, 4, 5), (6, 7, 8),  # rows
    (0, 3, 6), (1, 4, 7), (2, 5, 8),  # columns
    (0, 4, 8), (2, 4, 6),  # diagonals
)


def other(mark: str) -> str:
    """The opponent's mark."""
    return "O" if mark == "X" else "X"


def to_move(board: Board) -> str:
    """The mark to move under the standard rule that X moves first."""
    filled = sum(cell != EMPTY for cell in board)
    return "X" if filled % 2 == 0 else "O"


def winner(board: Board) -> str | None:
    """The mark with three in a line, or None."""
    for a, b, c in LINES:
        if board[a] != EMPTY and board[a] == board[b] == board[c]:
            return board[a]
    return None


def is_full(board: Board) -> bool:
    return EMPTY not in board


def is_terminal(board: Board) -> bool:
    """Won or full: no move may follow."""
    return winner(board) is not None or is_full(board)


def legal_moves(board: Board) -> tuple[int, ...]:
    """Empty squares (1-9), ascending; empty when the game is over."""
    if winner(board) is not None:
        return ()
    return tuple(i + 1 for i, cell in enumerate(board) if cell == EMPTY)


def occupied_squares(board: Board) -> tuple[int, ...]:
    return tuple(i + 1 for i, cell in enumerate(board) if cell != EMPTY)


def play(board: Board, square: int, mark: str) -> Board:
    """The board after `mark` takes `square`. Raises ValueError if the move is not legal."""
    if square not in legal_moves(board):
        raise ValueError(f"square {square} is not a legal move")
    cells = list(board)
    cells[square - 1] = mark
    return tuple(cells)


def winning_moves(board: Board, player: str) -> tuple[int, ...]:
    """Squares that win the game for `player` at once."""
    return tuple(m for m in legal_moves(board) if winner(play(board, m, player)) == player)


@functools.lru_cache(maxsize=None)
def value(board: Board, player: str) -> int:
    """Game-theoretic value for `player`, who is to move: +1 win, 0 draw, -1 loss.

    Memoised: the whole game has under 6,000 reachable positions per player to move.
    """
    won = winner(board)
    if won is not None:
        return 1 if won == player else -1
    moves = legal_moves(board)
    if not moves:
        return 0
    return max(-value(play(board, m, player), other(player)) for m in moves)


@functools.lru_cache(maxsize=None)
def best_moves(board: Board, player: str) -> tuple[int, ...]:
    """Every square whose game-theoretic value is optimal for `player` (to move), ascending.

    "Best" means value-optimal, not fastest: when several moves all force a win, all are best
    (an immediate win is one of them). Empty on a terminal board.
    """
    moves = legal_moves(board)
    if not moves:
        return ()
    scores = {m: -value(play(board, m, player), other(player)) for m in moves}
    top = max(scores.values())
    return tuple(m for m in moves if scores[m] == top)


# The 8 symmetries of the square (rotations and reflections), as cell permutations:
# symmetry s maps board to tuple(board[i] for i in s).
_ROTATE = (6, 3, 0, 7, 4, 1, 8, 5, 2)
_MIRROR = (2, 1, 0, 5, 4, 3, 8, 7, 6)


def _symmetries() -> tuple[tuple[int, ...], ...]:
    out, perm = [], tuple(range(9))
    for _ in range(4):
        out += [perm, tuple(perm[i] for i in _MIRROR)]
        perm = tuple(perm[i] for i in _ROTATE)
    return tuple(out)


SYMMETRIES = _symmetries()
HOLDOUT_SHARE = 10  # one class of boards in this many is held out of training


def canonical(board: Board) -> str:
    """The board's symmetry class, as the smallest of its 8 rotations and reflections."""
    return min("".join(board[i] for i in perm) for perm in SYMMETRIES)


def held_out(board: Board) -> bool:
    """Whether the board's symmetry class is kept out of training (a fixed tenth of the
    classes, by hash), so that evaluation positions drawn from them are boards the policy
    never trained on, in any orientation."""
    digest = hashlib.sha256(canonical(board).encode()).digest()
    return int.from_bytes(digest[:8], "big") % HOLDOUT_SHARE == 0


BOARD_FORMATS = ("lists", "grid")


def render(board: Board, style: str = "grid") -> str:
    """The board as text.

    grid   three lines like `X|2|O`: empty squares show their number, so a small model can
           read the move it needs to name straight off the board;
    lists  `X: 1 5\nO: 3\nfree: 2 4 6 7 8 9`: every mark as the number of its square. A
           line is then a set of numbers, whatever the position of its squares in the text:
           supervised on minimax moves (a diagnostic only), the 1.1M-parameter tiny model
           found a minimax-best move on 85 % of boards from this text against 71 % from the
           grid, after the same 16,000 examples.
    """
    if style == "lists":
        squares = {mark: " ".join(str(i + 1) for i, c in enumerate(board) if c == mark) or "-"
                   for mark in (*MARKS, EMPTY)}
        return f"X: {squares['X']}\nO: {squares['O']}\nfree: {squares[EMPTY]}"
    if style != "grid":
        raise ValueError(f"board style must be one of {BOARD_FORMATS}, got {style!r}")
    cells = [cell if cell != EMPTY else str(i + 1) for i, cell in enumerate(board)]
    return "\n".join("|".join(cells[r * 3 : r * 3 + 3]) for r in range(3))
