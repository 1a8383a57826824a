"""The `arl` command: train, warmstart, plot, eval, doctor, plan.

Configs are validated before anything heavy is imported or Ray starts, so a bad key fails
in about a second with a message that names it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from arl.config import ConfigError, load_config
from arl.dtypes import DTYPES


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="arl", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="GSPO training (embedded Ray, or the cluster it runs on)")
    train.add_argument("config", nargs="+", help="YAML config file(s), then key=value overrides")
    warm = sub.add_parser("warmstart", help="build and warm-start the tiny offline model")
    warm.add_argument("config", nargs="*", help="optional YAML file(s), then key=value overrides")
    warm.add_argument("--force", action="store_true", help="rebuild even if cached")
    plot = sub.add_parser("plot", help="draw a run's curves from its metrics.jsonl")
    plot.add_argument("run_dir")
    plot.add_argument("--out", default=None, help="PNG path (default: RUN_DIR/curves.png)")
    _eval_parser(sub)
    doctor = sub.add_parser("doctor", help="preflight: packages, machine, Ray, wandb, model")
    doctor.add_argument("config", nargs="*", help="YAML config file(s), then key=value overrides")
    plan = sub.add_parser("plan", help="a memory plan for a config against a machine's memory")
    plan.add_argument("config", nargs="+", help="YAML config file(s), then key=value overrides")
    plan.add_argument("--memory-gb", type=float, default=None,
                      help="host memory to plan for (default: this machine's)")
    plan.add_argument("--gpu-memory-gb", type=float, default=None,
                      help="GPU memory to plan for (default: this machine's GPU, if any)")
    plan.add_argument("--unified-memory-gb", type=float, default=None,
                      help="one pool shared by CPU and GPU, e.g. 128 for a DGX Spark")
    plan.add_argument("--prompt-tokens", type=int, default=None,
                      help="the longest prompt, instead of rendering the env's prompts with "
                           "the model's tokenizer (for a model folder with only config.json)")
    return parser


def _eval_parser(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="win/draw/loss/illegal rates, or accuracy on positions")
    ev.add_argument("--checkpoint", required=True,
                    help="a checkpoint directory (runs/<name>/checkpoints/step_<n>) or model dir")
    ev.add_argument("--env", default="tictactoe", choices=("tictactoe", "connect_four"))
    ev.add_argument("--opponent", default="minimax", help="minimax | random | eps:<p>")
    ev.add_argument("--games", type=int, default=200)
    ev.add_argument("--positions", default=None,
                    help="JSONL file of positions to score instead of playing games")
    ev.add_argument("--samples", type=int, default=0,
                    help="k > 0: sample k replies per game or position (default: greedy, 1)")
    ev.add_argument("--temperature", type=float, default=1.0, help="with --samples")
    ev.add_argument("--seed", type=int, default=0)
    ev.add_argument("--max-new-tokens", type=int, default=48)
    ev.add_argument("--dtype", default="auto", choices=DTYPES,
                    help="auto: bfloat16 where this CPU has bf16 instructions, else float32")


def _split(items: list[str]) -> tuple[list[str], list[str]]:
    """YAML paths first, then key=value overrides."""
    paths = [i for i in items if "=" not in i]
    overrides = [i for i in items if "=" in i]
    return paths, overrides


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    # key=value overrides may also follow the options (`arl plan cfg.yaml --memory-gb 8 k=v`).
    if extra and all("=" in e and not e.startswith("-") for e in extra) and hasattr(args,
                                                                                  "config"):
        args.config += extra
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "train":
            cfg = load_config(*_split(args.config))
            from app.train import NonFiniteError, Stopped, train
            from learner.checkpoint import CheckpointError

            try:
                metrics = train(cfg)
            except Stopped as err:
                print(f"arl: {err}", file=sys.stderr)
                return 128 + signal.SIGTERM
            except (NonFiniteError, CheckpointError) as err:
                print(f"arl: {err}", file=sys.stderr)
                return 3
            reward = metrics.get("rollout/reward_mean")  # absent: resumed a finished run
            print(f"done: {cfg.steps} steps" + ("" if reward is None else
                                                f", reward_mean {reward:.3f}"))
        elif args.command == "warmstart":
            cfg = load_config(*_split(args.config), check_paths=False)
            from warmstart.build import warmstart

            warmstart(cfg, force=args.force)
        elif args.command == "plot":
            from app.plot import plot_run

            print(plot_run(args.run_dir, args.out))
        elif args.command == "eval":
            return _eval(args)
        elif args.command == "plan":
            return _plan(args)
        elif args.command == "doctor":
            from app.doctor import doctor

            return 1 if doctor(*_split(args.config)) else 0
    except ConfigError as err:
        print(f"arl: {err}", file=sys.stderr)
        return 2
    return 0


def _eval(args: argparse.Namespace) -> int:
    """`arl eval`: a table for people, then one JSON line for scripts."""
    import json

    from arl.config import EnvConfig
    from arl.evaluation import parse_opponent, read_positions
    from arl.types import SamplingParams

    try:
        opponent = parse_opponent(args.opponent)
        positions = read_positions(args.positions) if args.positions else None
        if args.games < 1 or args.samples < 0:
            raise ValueError("--games must be >= 1 and --samples >= 0")
    except (OSError, ValueError) as err:
        print(f"arl eval: {err}", file=sys.stderr)
        return 2
    from actors.evaluate import load_policy, play_games, score_positions

    engine = load_policy(args.checkpoint, args.dtype)
    samples = args.samples or 1
    params = SamplingParams(args.temperature if args.samples else 0.0, 1.0,
                            args.max_new_tokens, args.seed)
    mode = f"{samples} sampled" if args.samples else "greedy"
    if positions is not None:
        rates = score_positions(engine, positions, samples, params)
        summary = {"positions": len(positions), "samples": samples}
        print(f"{len(positions)} positions, {mode} replies, 95 % Wilson intervals")
    else:
        env_cfg = EnvConfig(name=args.env, opponent=opponent.name,
                            opponent_epsilon=opponent.epsilon)
        rates = play_games(engine, env_cfg, args.games, samples, params)
        summary = {"env": args.env, "opponent": args.opponent, "games": args.games * samples}
        print(f"{args.games * samples} games of {args.env} against {args.opponent}, {mode}, "
              "95 % Wilson intervals")
    for name, rate in rates.items():
        print(f"  {name:<13} {rate}")
    print(json.dumps({**summary, **{name: r.as_dict() for name, r in rates.items()}}))
    return 0


def _plan(args: argparse.Namespace) -> int:
    """`arl plan`: the plan's table, then its JSON line; exit 1 if it does not fit."""
    from app import plan

    cfg = load_config(*_split(args.config))
    machine = _machine(args)
    from learner.gguf import prepare_model

    cfg.model.path = prepare_model(cfg.model.path)
    shape = plan.model_shape(cfg.model.path, cfg.learner.lora.target_modules)
    prompt = args.prompt_tokens if args.prompt_tokens else plan.prompt_tokens(cfg)
    lines, summary, fits = plan.report(cfg, shape, machine, prompt)
    print("\n".join(lines))
    print(plan.as_json(summary))
    return 0 if fits else 1


def _machine(args: argparse.Namespace):
    """The memory pools `arl plan` plans against: the flags, else this machine."""
    from app.doctor import total_memory_gib
    from app.plan import GIB, Machine

    if args.unified_memory_gb is not None:
        return Machine(int(args.unified_memory_gb * GIB), None, unified=True)
    host = args.memory_gb if args.memory_gb is not None else total_memory_gib()
    gpu = args.gpu_memory_gb
    if gpu is None:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_properties(0).total_memory / GIB
    return Machine(int(host * GIB), None if gpu is None else int(gpu * GIB))


if __name__ == "__main__":
    sys.exit(main())
