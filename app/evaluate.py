"""`arl eval`: a checkpoint's win/draw/loss/illegal rates in full games, or its accuracy on a
positions file, with 95 % intervals; a table for people, then one JSON line for scripts."""

from __future__ import annotations

import argparse
import json

from app.run import resolve_checkpoint
from arl.config import EnvConfig
from arl.errors import UserError
from arl.evaluation import parse_opponent, read_positions
from arl.types import SamplingParams


def run_eval(args: argparse.Namespace) -> int:
    try:
        opponent = parse_opponent(args.opponent)
        positions = read_positions(args.positions) if args.positions else None
    except OSError as err:
        raise UserError(f"cannot read {args.positions}: {err.strerror}") from None
    except ValueError as err:
        raise UserError(str(err)) from None
    if args.games < 1 or args.samples < 0:
        raise UserError("--games must be >= 1 and --samples >= 0")
    checkpoint = resolve_checkpoint(args.checkpoint)
    from actors.evaluate import load_policy, play_games, score_positions, trained_env

    engine = load_policy(checkpoint, args.dtype)
    board_format = args.board_format or trained_env(checkpoint).get("board_format", "lists")
    samples = args.samples or 1
    params = SamplingParams(args.temperature if args.samples else 0.0, 1.0,
                            args.max_new_tokens, args.seed)
    mode = f"{samples} sampled" if args.samples else "greedy"
    if positions is not None:
        rates = score_positions(engine, positions, samples, params,
                                EnvConfig(name="tictactoe_move", board_format=board_format))
        summary = {"positions": len(positions), "samples": samples}
        print(f"{checkpoint}: {len(positions)} positions, {mode} replies, 95 % Wilson intervals")
    else:
        env_cfg = EnvConfig(name=args.env, opponent=opponent.name,
                            opponent_epsilon=opponent.epsilon, board_format=board_format)
        rates = play_games(engine, env_cfg, args.games, samples, params)
        summary = {"env": args.env, "opponent": args.opponent, "games": args.games * samples}
        print(f"{checkpoint}: {args.games * samples} games of {args.env} against "
              f"{args.opponent}, {mode}, 95 % Wilson intervals")
    for name, rate in rates.items():
        print(f"  {name:<13} {rate}")
    print(json.dumps({"checkpoint": checkpoint, **summary,
                      **{name: r.as_dict() for name, r in rates.items()}}))
    return 0
