"""The shipped positions files: generated from minimax, on held-out boards only."""

from __future__ import annotations

import json
import pathlib

from arl.envs import tictactoe_rules as rules
from arl.envs.tictactoe_move import opening_board
from arl.envs.tictactoe_positions import KINDS, positions

SHIPPED = pathlib.Path(__file__).resolve().parents[2] / "configs" / "positions"


def test_shipped_files_are_what_the_generator_writes():
    generated = positions()
    for kind in KINDS:
        rows = [json.loads(line) for line in (SHIPPED / f"{kind}.jsonl").read_text().splitlines()]
        assert rows == generated[kind], kind
        assert rows, kind


def test_good_moves_are_what_minimax_says():
    for kind, rows in positions().items():
        for row in rows:
            board, me = tuple(row["board"]), row["to_move"]
            assert rules.held_out(board) and not rules.is_terminal(board)
            assert me == rules.to_move(board)
            good = set(row["good_moves"])
            if kind == "win_in_one":
                assert good == set(rules.winning_moves(board, me))
            else:
                assert good <= set(rules.best_moves(board, me))
            if kind == "block_in_one":
                assert good == set(rules.winning_moves(board, rules.other(me)))


def test_training_boards_never_come_from_the_held_out_classes():
    held = {row["board"] for rows in positions().values() for row in rows}
    for seed in range(3000):
        board = opening_board(seed)
        assert not rules.held_out(board) and "".join(board) not in held
