"""Reference points for full tic-tac-toe games: perfect play (a minimax move, an immediate win
first) and uniformly random legal moves against an opponent, both seats, scored win +1 /
draw 0 / loss -1. What a trained policy's full-game numbers should be read against.

    python bench/game_baselines.py [--games 4000] [--epsilon 0.3] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from arl.envs import tictactoe_rules as rules  # noqa: E402
from arl.envs.opponents import EpsMinimaxOpponent, MinimaxOpponent, RandomOpponent  # noqa: E402


def play(player, opponent, seat: str, rng: random.Random) -> int:
    """One game from the empty board; +1 / 0 / -1 for `player` sitting at `seat`."""
    board = rules.EMPTY_BOARD
    while not rules.is_terminal(board):
        mover = rules.to_move(board)
        agent = player if mover == seat else opponent
        board = rules.play(board, agent.choose(board, mover, rng), mover)
    won = rules.winner(board)
    return 0 if won is None else (1 if won == seat else -1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=4000)
    parser.add_argument("--epsilon", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    players = {
        "perfect": MinimaxOpponent(rules.best_moves, rules.winning_moves),
        "random_legal": RandomOpponent(rules.legal_moves),
    }
    opponents = {
        f"eps_minimax({args.epsilon})": EpsMinimaxOpponent(
            args.epsilon, rules.legal_moves, rules.best_moves, rules.winning_moves),
        "minimax": MinimaxOpponent(rules.best_moves, rules.winning_moves),
        "random": RandomOpponent(rules.legal_moves),
    }
    results = {}
    for pname, player in players.items():
        for oname, opponent in opponents.items():
            rng = random.Random(args.seed)
            scores = [play(player, opponent, "XO"[i % 2], rng) for i in range(args.games)]
            n = len(scores)
            row = {"win": scores.count(1) / n, "draw": scores.count(0) / n,
                   "loss": scores.count(-1) / n, "mean": sum(scores) / n}
            results[f"{pname} vs {oname}"] = row
            print(f"{pname:13s} vs {oname:18s} win {row['win']:6.1%} draw {row['draw']:6.1%} "
                  f"loss {row['loss']:6.1%} mean {row['mean']:+.3f}")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
