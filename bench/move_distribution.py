"""Where a one-move policy stands on each board: the exact probability it gives every square
(teacher-forced over the well-formed `choose_square` calls, in nine spellings each), on fresh
boards of the one-move task (`tictactoe_move`; 2-7 marks by default, the reference
distribution: the demo trains on 0-8).

A sampled reward says how often the policy is right; this says how it is wrong. A board is
*decided* when one square holds over 90 % of the policy's mass, and *decided wrong* when
minimax-best moves (wins included) hold under 10 % of it: a group on such a board plays the
same square in all its samples, earns one reward, and teaches nothing, so RL cannot repair
it by sampling the policy.

    python bench/move_distribution.py --checkpoint runs/tictactoe_move [--boards 400]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from arl.envs import tictactoe_rules as rules  # noqa: E402
from arl.envs.registry import env_config  # noqa: E402
from arl.envs.tictactoe import CHOOSE_SQUARE  # noqa: E402
from arl.envs.tictactoe_move import TicTacToeMoveEnv, move_outcome, outcome_reward  # noqa: E402
from arl.episode import ChatRenderer  # noqa: E402
from arl.model.checkpoint.runs import resolve_checkpoint  # noqa: E402
from arl.rollout.evaluation import load_policy  # noqa: E402
from arl.tools import format_tool_call  # noqa: E402
from arl.types import ToolCall  # noqa: E402

FIRST_SEED = 10**6  # far from the seeds a training run draws its boards with
DECIDED, WRONG = 0.9, 0.1
# A policy can drift to another valid JSON spelling of the same call (no space before the
# square, or several: long runs were seen to drift to six); each spelling is a different
# text, so their probabilities add up.
SPACINGS = tuple(" " * n for n in range(9))


def call_texts(square: int) -> list[str]:
    """The spellings of choose_square(square) that are counted, the canonical one among them."""
    canonical = format_tool_call(ToolCall(CHOOSE_SQUARE.name, {"square": square}))
    return [canonical.replace('"square": ', f'"square":{gap}') for gap in SPACINGS]


def square_probs(model, prompt: list[int], replies: list[list[int]]) -> np.ndarray:
    """p(reply k | prompt) for each reply, exactly (teacher forcing). -> [len(replies)]"""
    ids = [prompt + r for r in replies]
    width = max(map(len, ids))
    batch = torch.tensor([i + [0] * (width - len(i)) for i in ids])  # right-padded [9, T]
    with torch.no_grad():
        logp = torch.log_softmax(model(batch).logits.float(), dim=-1)  # [9, T, V]
    out = []
    for k, reply in enumerate(replies):
        at = torch.arange(len(prompt) - 1, len(prompt) + len(reply) - 1)
        out.append(float(logp[k, at, torch.tensor(reply)].sum()))
    return np.exp(np.array(out))


def board_rows(policy: str, boards: int, min_marks: int, max_marks: int) -> list[dict]:
    # A run directory (its newest checkpoint), a checkpoint, a model folder or cache:<name>.
    engine = load_policy(resolve_checkpoint(policy))
    tokenizer = engine.get_tokenizer()
    renderer = ChatRenderer(tokenizer, stop_token=tokenizer.eos_token)
    cfg = env_config("tictactoe_move", min_marks=min_marks, max_marks=max_marks)
    replies = [renderer.encode(text + tokenizer.eos_token)
               for k in range(1, 10) for text in call_texts(k)]
    rows = []
    for seed in range(FIRST_SEED, FIRST_SEED + boards):
        env = TicTacToeMoveEnv(cfg)
        probs = square_probs(engine.model, renderer.prompt_ids(env.reset(seed)), replies)
        probs = probs.reshape(9, len(SPACINGS)).sum(axis=1)  # [9]: every spelling of a square
        rewards = np.array([outcome_reward(move_outcome(env.board, env.agent, k), cfg)
                            for k in range(1, 10)])
        mine, theirs = env.agent, rules.other(env.agent)
        kind = ("win" if rules.winning_moves(env.board, mine) else
                "block" if rules.winning_moves(env.board, theirs) else "other")
        best = np.isin(np.arange(1, 10), rules.best_moves(env.board, mine))
        rows.append({"probs": probs, "rewards": rewards, "best": best, "kind": kind})
    return rows


def summary(rows: list[dict]) -> dict[str, object]:
    mass = np.array([r["probs"].sum() for r in rows])
    shares = [r["probs"] / r["probs"].sum() for r in rows]
    best = np.array([s[r["best"]].sum() for s, r in zip(shares, rows, strict=True)])
    top = np.array([s.max() for s in shares])
    decided_wrong = (top > DECIDED) & (best < WRONG)
    argmax = collections.Counter(int(s.argmax()) + 1 for s, w in zip(shares, decided_wrong,
                                                                      strict=True) if w)
    kinds = {k: round(float(decided_wrong[[r["kind"] == k for r in rows]].mean()), 3)
             for k in ("win", "block", "other")}
    return {
        "boards": len(rows),
        "well_formed_mass": round(float(mass.mean()), 3),
        "expected_reward": round(float(np.mean([(s * r["rewards"]).sum() for s, r in
                                                zip(shares, rows, strict=True)])), 3),
        "greedy_reward": round(float(np.mean([r["rewards"][s.argmax()] for s, r in
                                              zip(shares, rows, strict=True)])), 3),
        "best_mass_mean": round(float(best.mean()), 3),
        "decided": round(float((top > DECIDED).mean()), 3),
        "decided_wrong": round(float(decided_wrong.mean()), 3),
        "decided_wrong_by_kind": kinds,
        "best_mass_when_decided_wrong_median": (float(f"{np.median(best[decided_wrong]):.2g}")
                                                if decided_wrong.any() else None),
        "decided_wrong_squares": dict(argmax.most_common()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True,
                        help="a run directory, checkpoint, model folder or cache:<name>")
    parser.add_argument("--boards", type=int, default=400)
    parser.add_argument("--min-marks", type=int, default=2)
    parser.add_argument("--max-marks", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(2)
    rows = board_rows(args.checkpoint, args.boards, args.min_marks, args.max_marks)
    print(json.dumps(summary(rows)))


if __name__ == "__main__":
    main()
