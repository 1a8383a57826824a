"""`arl eval`: a checkpoint's win/draw/loss/illegal rates in full games, or its accuracy on a
positions file, with 95 % intervals; a table for people, then one JSON line for scripts."""

from __future__ import annotations

import argparse
import json

from arl.config import ConfigError, EnvConfig, load_config
from arl.env_spec import resolve_env
from arl.errors import UserError, shown
from arl.model.checkpoint.runs import resolve_checkpoint
from arl.rollout.evaluation import read_positions
from arl.types import SamplingParams


def run_eval(args: argparse.Namespace) -> int:
    if args.games < 1 or args.samples < 0:
        raise UserError("--games must be >= 1 and --samples >= 0")
    checkpoint = resolve_checkpoint(args.checkpoint)
    env_cfg = _env_config(args, checkpoint)
    spec = resolve_env(env_cfg.name)
    positions = _positions(args.positions, spec, env_cfg) if args.positions else None
    opponent, played = args.opponent or _default_opponent(spec, env_cfg), env_cfg.name
    if positions is None:
        if spec.eval_game is None:
            raise UserError(f"env {spec.name!r} has no opponents to play full games against")
        try:
            played, env_cfg = spec.eval_game(env_cfg, opponent, "random")
        except ValueError as err:
            raise UserError(f"--opponent: {err}") from None
    from arl.rollout.evaluation import game_rates, load_policy, play, score_positions

    engine = load_policy(checkpoint, args.dtype)
    samples = args.samples or 1
    params = SamplingParams(args.temperature if args.samples else 0.0, 1.0,
                            args.max_new_tokens, args.seed)
    mode = f"{samples} sampled" if args.samples else "greedy"
    if positions is not None:
        rates = score_positions(engine, env_cfg, positions, samples, params)
        summary = {"positions": len(positions), "samples": samples}
        print(f"{checkpoint}: {len(positions)} positions, {mode} replies, 95 % Wilson intervals")
    else:
        episodes = play(engine, env_cfg, args.games, samples, params)
        rates = game_rates(episodes)
        reward = sum(t.reward for t in episodes) / len(episodes)
        summary = {"env": played, "opponent": opponent, "games": len(episodes),
                   "reward_mean": round(reward, 4)}
        print(f"{checkpoint}: {len(episodes)} games of {played} against {opponent}, {mode}, "
              f"mean reward {reward:+.3f}, 95 % Wilson intervals")
    for name, rate in rates.items():
        print(f"  {name:<13} {rate}")
    print(json.dumps({"checkpoint": checkpoint, **summary,
                      **{name: r.as_dict() for name, r in rates.items()}}))
    return 0


def _env_config(args: argparse.Namespace, checkpoint: str) -> EnvConfig:
    """The env config `arl eval` plays: `--env` with its defaults, or without it the env the
    checkpoint was trained on with all its keys, checked as data (`trained_env`: nothing it
    names is imported; a model folder: tictactoe); then the `env.key=value` overrides, and
    `--board-format`."""
    overrides = list(args.overrides)
    if args.board_format:
        overrides.append(f"env.board_format={args.board_format}")
    bad = [o for o in overrides if not o.startswith("env.") or "=" not in o]
    if bad:
        raise UserError(f"{shown(bad[0])}: arl eval takes env.key=value overrides only")
    if args.env is not None:
        name, recorded = args.env, None
    else:
        from arl.model.checkpoint.runs import trained_env

        trained = trained_env(checkpoint) or {"name": "tictactoe"}
        name, recorded = trained["name"], (f"checkpoint {checkpoint}", {"env": trained})
    try:
        return load_config([], [f"env.name={name}", *overrides], check_paths=False,
                           recorded=recorded).env
    except ConfigError as err:
        raise UserError(str(err)) from None


def _default_opponent(spec, env_cfg: EnvConfig) -> str:
    """minimax where the env has it, else the opponent the env is configured with."""
    try:
        if spec.eval_game is not None:
            spec.eval_game(env_cfg, "minimax", "X")
            return "minimax"
    except ValueError:
        pass
    return str(vars(env_cfg).get("opponent", "random"))


def _positions(path: str, spec, env_cfg: EnvConfig) -> list[dict]:
    """The rows of a positions file, each checked by the env (UserError naming the line)."""
    if spec.position is None:
        raise UserError(f"env {spec.name!r} reads no positions files")
    try:
        rows = read_positions(path, lambda row: spec.position(env_cfg, row))
    except OSError as err:
        raise UserError(f"cannot read {path}: {err.strerror}") from None
    except ValueError as err:
        raise UserError(str(err)) from None
    return rows
