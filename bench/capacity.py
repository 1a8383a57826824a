"""A diagnostic of the tiny model's capacity, never a warm start: how well supervised learning
of minimax moves fits the one-move task, on the boards training shows and on the held-out
symmetry classes of the positions files. What RL could reach with the same model and prompt
is bounded by roughly this.

    python bench/capacity.py [--examples 16000] [--epochs 1] [--model cache:tiny-warmstart]
                             [--hidden 0 --layers 4 --heads 4] [--board-format lists|grid]
                             [--min-marks 2 --max-marks 7] [--out DIR]

The model continues from `--model` (the warm start: it knows the format), or, with `--hidden
H`, is built from scratch at that size with the warm start's tokenizer. Targets are a
uniformly random winning move where one exists, else a uniformly random minimax-best move.
`--min-marks 0 --max-marks 8` (with `--model cache:tiny-warmstart-board`) covers every board
a full game reaches; play the result with `arl eval --checkpoint DIR --opponent minimax
env.context=board` to bound what RL could reach in full games.

Prints one JSON line: accuracy (minimax-best or win) on 500 fresh training boards, and
accuracy and illegal rate on each positions file, all greedy.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

POSITIONS = ("win_in_one", "block_in_one", "fork", "best_move")


def minimax_examples(env_cfg, n: int, seed: int) -> list[tuple]:
    """`n` (messages, tools, target) of the one-move task with minimax targets."""
    from arl.envs import tictactoe_rules as rules
    from arl.envs.tictactoe_move import TicTacToeMoveEnv
    from arl.tools import format_tool_call
    from arl.types import ToolCall

    rng = random.Random(seed)
    env = TicTacToeMoveEnv(env_cfg)
    examples = []
    for _ in range(n):
        reset = env.reset(rng.randrange(2**31))
        mover = rules.to_move(env.board)
        good = rules.winning_moves(env.board, mover) or rules.best_moves(env.board, mover)
        call = format_tool_call(ToolCall("choose_square", {"square": rng.choice(list(good))}))
        examples.append((reset.messages, reset.tools, call))
    return examples


def build(args):
    """(model, tokenizer): the model at `--model`, or a fresh one of `--hidden` width."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from arl.model.tiny import build_tiny_model
    from arl.model_source import local_path

    path = local_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if args.hidden:
        model = build_tiny_model(tokenizer, args.hidden, args.layers, args.heads, args.seed)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype="float32")
    return model, tokenizer


def score(folder: str, env_cfg, seed: int) -> dict:
    from arl.envs.registry import make_env
    from arl.episode import ChatRenderer, run_episodes
    from arl.rollout.evaluation import load_policy, read_positions, score_positions, summarize
    from arl.types import SamplingParams

    engine = load_policy(folder)
    params = SamplingParams(0.0, 1.0, 32, seed)
    renderer = ChatRenderer(engine.get_tokenizer(), stop_token=engine.get_tokenizer().eos_token)
    starts = [(make_env(env_cfg), seed + 10**6 + i, i) for i in range(500)]
    fresh = summarize(run_episodes(engine, renderer, starts, params, max_turns=1))
    result = {"train_boards": round(fresh.outcomes.get("best", 0.0)
                                    + fresh.outcomes.get("win", 0.0), 4)}
    for name in POSITIONS:
        rows = read_positions(f"configs/positions/{name}.jsonl")
        rates = score_positions(engine, env_cfg, rows, 1, params)
        result[name] = round(rates["accuracy"].rate, 4)
        result[f"{name}_illegal"] = round(rates["illegal"].rate, 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=16000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--model", default="cache:tiny-warmstart")
    parser.add_argument("--hidden", type=int, default=0)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--board-format", default="lists", choices=("lists", "grid"))
    parser.add_argument("--min-marks", type=int, default=2)
    parser.add_argument("--max-marks", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/capacity")
    args = parser.parse_args()

    from arl.envs.registry import env_config
    from arl.model.causal_lm import set_torch_threads
    from arl.model.tiny import save_model_dir
    from arl.warmstart.sft import supervised_finetune

    set_torch_threads(os.cpu_count() or 1)
    env_cfg = env_config("tictactoe_move", board_format=args.board_format,
                         min_marks=args.min_marks, max_marks=args.max_marks)
    model, tokenizer = build(args)
    start = time.perf_counter()
    examples = minimax_examples(env_cfg, args.examples, args.seed)
    losses = supervised_finetune(model, tokenizer, examples, args.epochs, args.lr, 32,
                                 args.seed, prompt_loss=bool(args.hidden))
    seconds = time.perf_counter() - start
    save_model_dir(model, tokenizer, args.out)
    print(json.dumps({"examples": args.examples, "epochs": args.epochs,
                      "hidden": args.hidden or "warm start", "layers": args.layers,
                      "parameters": sum(p.numel() for p in model.parameters()),
                      "loss": round(losses[-1], 4), "train_seconds": round(seconds, 1),
                      **score(args.out, env_cfg, args.seed)}))


if __name__ == "__main__":
    main()
