"""The `arl` command: train, warmstart, plot.

Configs are validated before anything heavy is imported or Ray starts, so a bad key fails
in about a second with a message that names it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from arl.config import ConfigError, load_config


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
    return parser


def _split(items: list[str]) -> tuple[list[str], list[str]]:
    """YAML paths first, then key=value overrides."""
    paths = [i for i in items if "=" not in i]
    overrides = [i for i in items if "=" in i]
    return paths, overrides


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.command == "train":
            cfg = load_config(*_split(args.config))
            from arl.train import NonFiniteError, Stopped, train
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
            from arl.warmstart import warmstart

            warmstart(cfg, force=args.force)
        elif args.command == "plot":
            from arl.plot import plot_run

            print(plot_run(args.run_dir, args.out))
    except ConfigError as err:
        print(f"arl: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
