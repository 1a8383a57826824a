"""Tic-tac-toe positions files for `arl eval --positions`, generated from minimax.

Every position is reachable (X moved first), not over, has the player to move as `to_move`,
and belongs to a symmetry class held out of training (`rules.held_out`): no policy trained on
`tictactoe_move` saw it, in any orientation. Four kinds:

  win_in_one    the player can win at once; good moves: the winning squares
  block_in_one  no win, the opponent threatens exactly one square; good move: that square
  fork          no win and no threat to block, and some move makes two threats at once (a
                forced win); good moves: every minimax-best move
  best_move     any position where some legal move is not minimax-best; good moves: the
                minimax-best ones

    python -m envs.tictactoe_positions configs/positions     # (re)writes the four files
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator

from arl.envs import tictactoe_rules as rules

KINDS = ("win_in_one", "block_in_one", "fork", "best_move")


def reachable() -> list[rules.Board]:
    """Every non-terminal board reachable from the empty one, in a fixed order."""
    seen: set[rules.Board] = set()
    order = []
    stack = [rules.EMPTY_BOARD]
    while stack:
        board = stack.pop()
        if board in seen:
            continue
        seen.add(board)
        if rules.is_terminal(board):
            continue
        order.append(board)
        stack += [rules.play(board, m, rules.to_move(board)) for m in rules.legal_moves(board)]
    return sorted(order, key=lambda b: (sum(c != rules.EMPTY for c in b), "".join(b)))


def _threats(board: rules.Board, player: str) -> int:
    return len(rules.winning_moves(board, player))


def classify(board: rules.Board) -> Iterator[tuple[str, tuple[int, ...]]]:
    """(kind, good moves) for every kind the position belongs to."""
    me = rules.to_move(board)
    wins = rules.winning_moves(board, me)
    threats = rules.winning_moves(board, rules.other(me))
    best = rules.best_moves(board, me)
    if wins:
        yield "win_in_one", wins
    elif len(threats) == 1 and threats == best:
        yield "block_in_one", threats
    elif not threats and rules.value(board, me) == 1 and any(
            _threats(rules.play(board, m, me), me) >= 2 for m in rules.legal_moves(board)):
        yield "fork", best
    if len(best) < len(rules.legal_moves(board)):
        yield "best_move", best


def positions() -> dict[str, list[dict]]:
    """Every held-out position of each kind, as positions-file rows."""
    out: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for board in reachable():
        if not rules.held_out(board):
            continue
        for kind, good in classify(board):
            out[kind].append({"board": "".join(board), "to_move": rules.to_move(board),
                              "good_moves": list(good)})
    return out


def write_positions(directory: str) -> dict[str, str]:
    """Write `<kind>.jsonl` for every kind into `directory`; return kind -> path."""
    os.makedirs(directory, exist_ok=True)
    paths = {}
    for kind, rows in positions().items():
        paths[kind] = os.path.join(directory, f"{kind}.jsonl")
        with open(paths[kind], "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)
    return paths


if __name__ == "__main__":
    for kind, path in write_positions(sys.argv[1] if len(sys.argv) > 1 else "positions").items():
        print(f"{kind}: {path}")
