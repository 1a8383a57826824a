"""Pure connect-four rules and a depth-limited alpha-beta search: no I/O, no state.

A board is a tuple of 6 * 7 cells, row by row from the TOP row; a cell is "X", "O" or EMPTY.
Columns are numbered 1-7 everywhere outside this module's internals. A piece dropped in a
column lands on the lowest empty cell of that column (gravity). Four in a row horizontally,
vertically or diagonally wins; a full board with no four is a draw.
"""

from __future__ import annotations

import math

EMPTY = "."
ROWS, COLS = 6, 7
Board = tuple[str, ...]
EMPTY_BOARD: Board = (EMPTY,) * (ROWS * COLS)

WIN_SCORE = 1_000_000  # above any heuristic sum; plus remaining depth, so sooner wins rank higher


def _windows() -> tuple[tuple[int, ...], ...]:
    """All 69 lines of four cells, as board indices."""
    out = []
    for r in range(ROWS):
        for c in range(COLS):
            for dr, dc in ((0, 1), (1, 0), (1, 1), (1, -1)):
                cells = [(r + k * dr, c + k * dc) for k in range(4)]
                if all(0 <= rr < ROWS and 0 <= cc < COLS for rr, cc in cells):
                    out.append(tuple(rr * COLS + cc for rr, cc in cells))
    return tuple(out)


WINDOWS = _windows()
# Why per cell: a new piece can only complete a window that contains it, so win checks after
# a move look at <= 13 windows instead of 69.
WINDOWS_AT = tuple(tuple(w for w in WINDOWS if i in w) for i in range(ROWS * COLS))
# Centre first: alpha-beta prunes far more when strong moves are tried first.
SEARCH_ORDER = (4, 3, 5, 2, 6, 1, 7)


def other(mark: str) -> str:
    return "O" if mark == "X" else "X"


def landing_index(board: Board, column: int) -> int | None:
    """Board index where a piece dropped in `column` (1-7) lands; None if the column is full."""
    for r in range(ROWS - 1, -1, -1):
        index = r * COLS + column - 1
        if board[index] == EMPTY:
            return index
    return None


def wins_at(board: Board, index: int) -> bool:
    """Whether the piece at `index` is part of four in a row."""
    mark = board[index]
    return mark != EMPTY and any(all(board[i] == mark for i in w) for w in WINDOWS_AT[index])


def winner(board: Board) -> str | None:
    """The mark with four in a row, or None."""
    for w in WINDOWS:
        mark = board[w[0]]
        if mark != EMPTY and all(board[i] == mark for i in w):
            return mark
    return None


def is_full(board: Board) -> bool:
    return EMPTY not in board


def is_terminal(board: Board) -> bool:
    return winner(board) is not None or is_full(board)


def legal_moves(board: Board) -> tuple[int, ...]:
    """Columns (1-7) that are not full, ascending; empty when the game is over."""
    if winner(board) is not None:
        return ()
    return tuple(c for c in range(1, COLS + 1) if board[c - 1] == EMPTY)


def play(board: Board, column: int, mark: str) -> Board:
    """The board after `mark` drops a piece in `column`. Raises ValueError if not legal."""
    if column not in legal_moves(board):
        raise ValueError(f"column {column} is not a legal move")
    return _drop(board, column, mark)[0]


def _drop(board: Board, column: int, mark: str) -> tuple[Board, int]:
    """Drop without the game-over check (the search already knows the game goes on)."""
    index = landing_index(board, column)
    if index is None:
        raise ValueError(f"column {column} is full")
    cells = list(board)
    cells[index] = mark
    return tuple(cells), index


def heuristic(board: Board, player: str) -> int:
    """A cheap static score for `player`: open twos and threes, and centre-column pieces.

    Only windows holding one side's pieces count; mixed windows can never become four.
    """
    opponent = other(player)
    score = 0
    for w in WINDOWS:
        cells = [board[i] for i in w]
        mine, theirs = cells.count(player), cells.count(opponent)
        if theirs == 0:
            score += (0, 0, 2, 5, 0)[mine]
        elif mine == 0:
            score -= (0, 0, 2, 6, 0)[theirs]  # threats against us weigh a little more
    centre = sum(board[r * COLS + 3] == player for r in range(ROWS))
    return score + 3 * centre


def _negamax(board: Board, player: str, depth: int, alpha: float, beta: float) -> float:
    """Score for `player` (to move) of a non-terminal board, searched `depth` plies deep.

    Fail-soft: a result <= alpha is an upper bound, >= beta a lower bound, else exact.
    """
    moves = [c for c in SEARCH_ORDER if board[c - 1] == EMPTY]
    if not moves:
        return 0
    if depth == 0:
        return heuristic(board, player)
    best = -math.inf
    for column in moves:
        child, index = _drop(board, column, player)
        if wins_at(child, index):
            score: float = WIN_SCORE + depth
        else:
            score = -_negamax(child, other(player), depth - 1, -beta, -alpha)
        best = max(best, score)
        alpha = max(alpha, score)
        if alpha >= beta:
            break
    return best


def move_scores(board: Board, player: str, depth: int) -> dict[int, float]:
    """Search score of each legal column for `player`; exact for every move that ties the best.

    Why the alpha of `best - 1`: scores are integers, so a move that merely ties the best so
    far still gets its exact score, while worse moves are cut early (their bound < best).
    """
    if depth < 1:
        raise ValueError("depth must be >= 1")
    scores: dict[int, float] = {}
    best = -math.inf
    for column in sorted(legal_moves(board), key=SEARCH_ORDER.index):
        child, index = _drop(board, column, player)
        if wins_at(child, index):
            score: float = WIN_SCORE + depth
        else:
            score = -_negamax(child, other(player), depth - 1, -math.inf, -(best - 1))
        scores[column] = score
        best = max(best, score)
    return scores


def best_moves(board: Board, player: str, depth: int) -> tuple[int, ...]:
    """All columns with the top search score at `depth` plies, ascending; empty if terminal."""
    scores = move_scores(board, player, depth)
    if not scores:
        return ()
    top = max(scores.values())
    return tuple(sorted(c for c, s in scores.items() if s == top))


def render(board: Board, style: str = "grid") -> str:
    """Six rows of cells separated by spaces, top row first, then the column numbers (the
    one style connect four has; `style` is accepted for the GameSpec signature)."""
    rows = [" ".join(board[r * COLS : (r + 1) * COLS]) for r in range(ROWS)]
    return "\n".join(rows + [" ".join(str(c) for c in range(1, COLS + 1))])
