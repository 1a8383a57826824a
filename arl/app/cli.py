"""The `arl` command: train, warmstart, eval, play, view, plot, doctor, plan, config, export.

Configs are validated before anything heavy is imported or Ray starts, so a bad key fails in
about a second with a message that names it. Every mistake of the user's (a bad config, a
missing file, an unusable checkpoint or model) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import logging
import sys

from arl import __version__
from arl.config import load_config
from arl.dtypes import DTYPES
from arl.errors import UserError, one_line

TRAIN_EPILOG = """\
outputs: runs/<run_name>/ under output_dir (default ./runs; in a Ray job, relative paths go
under $ARL_HOME/runs, ARL_HOME defaulting to ~/.cache/arl; the first log line names the
directory): metrics.jsonl, samples.jsonl, curves.png, report.html, checkpoints/step_<n>/
and wandb/.

resume: run the same command with resume=auto; it continues from the run's newest
checkpoint (resume=step_<n>: from that one; a corrupt checkpoint is named, with the newest
intact one, exit 3). A learner actor that dies is rebuilt from the last checkpoint inside
the run (learner.checkpoint.max_restarts). Ctrl-C or SIGTERM finishes the current step, saves a
checkpoint and exits (130 / 143); a second Ctrl-C stops at once.

examples:
  arl train configs/tictactoe_move.yaml
  arl train configs/tictactoe_move.yaml learner.optim.lr=5e-5 steps=100
  arl config show configs/tictactoe_move.yaml      (every key, its default and help)
"""


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (exit status 2), as every other error of arl's."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: {one_line(message)} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="arl", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"arl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="GSPO training (embedded Ray, or the cluster it runs on)",
                           epilog=TRAIN_EPILOG, formatter_class=argparse.RawTextHelpFormatter)
    train.add_argument("config", nargs="+", help="YAML config file(s), then key=value overrides")
    warm = sub.add_parser("warmstart", help="teach the tiny offline model, or a pretrained one "
                          "(warmstart.base), the tool-call format")
    warm.add_argument("config", nargs="*", help="optional YAML file(s), then key=value overrides")
    warm.add_argument("--force", action="store_true", help="rebuild even if cached")
    _eval_parser(sub)
    play = sub.add_parser("play", help="play tic-tac-toe against a checkpoint in the terminal")
    play.add_argument("checkpoint", help="a run dir, its checkpoints/latest, step_<n> or a model")
    play.add_argument("--you", choices=("X", "O"), default="X", help="your mark (X moves first)")
    play.add_argument("--dtype", default="auto", choices=DTYPES)
    view = sub.add_parser("view", help="serve a run's report.html on 127.0.0.1")
    view.add_argument("run_dir")
    view.add_argument("--port", type=int, default=8765)
    view.add_argument("--host", default="127.0.0.1", help="bind address (default loopback)")
    plot = sub.add_parser("plot", help="redraw a run's curves.png and report.html")
    plot.add_argument("run_dir")
    plot.add_argument("--out", default=None, help="PNG path (default: RUN_DIR/curves.png)")
    doctor = sub.add_parser("doctor", help="preflight: packages, machine, Ray, wandb, model, "
                            "and what a config needs")
    doctor.add_argument("config", nargs="*", help="YAML config file(s), then key=value overrides")
    _plan_parser(sub)
    config = sub.add_parser("config", help="show the resolved config with every key's help")
    config.add_argument("action", choices=("show",))
    config.add_argument("config", nargs="*", help="YAML config file(s), then key=value overrides")
    export = sub.add_parser("export", help="write a checkpoint as a Hugging Face model folder")
    export.add_argument("checkpoint", help="a run dir, its checkpoints/latest or step_<n>")
    export.add_argument("out_dir")
    export.add_argument("--dtype", default="float32", choices=("bfloat16", "float32"),
                        help="dtype of the saved weights (training keeps fp32)")
    return parser


def _eval_parser(sub: argparse._SubParsersAction) -> None:
    ev = sub.add_parser("eval", help="win/draw/loss/illegal rates, or accuracy on positions")
    ev.add_argument("--checkpoint", required=True,
                    help="a run dir, its checkpoints/latest, checkpoints/step_<n>, a model dir, "
                    "or cache:<name> (a model arl built, e.g. cache:tiny-warmstart)")
    ev.add_argument("--env", default=None,
                    help="the env whose games are played (any env.name, with its default "
                    "keys); default: the checkpoint's run's env with its keys (the one-move "
                    "task plays full tic-tac-toe games), else tictactoe")
    ev.add_argument("--opponent", default=None,
                    help="as the env spells its opponents (arl's games: minimax | random | "
                    "eps_minimax:<p>; OpenSpiel: random | mcts | alpha_beta); default: "
                    "minimax where the env has it, else its configured opponent")
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
    ev.add_argument("overrides", nargs="*", metavar="env.KEY=VALUE",
                    help="env keys for the games, e.g. env.game=kuhn_poker")
    ev.add_argument("--board-format", default=None, choices=("lists", "grid"),
                    help="how boards are shown (default: the checkpoint's run's, else lists)")


def _plan_parser(sub: argparse._SubParsersAction) -> None:
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


def split_config_args(items: list[str]) -> tuple[list[str], list[str]]:
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
        return COMMANDS[args.command](args)
    except UserError as err:
        print(f"arl {args.command}: {one_line(str(err))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a second Ctrl-C during training, or one anywhere else
        print(f"arl {args.command}: interrupted", file=sys.stderr)
        return 130


def _train(args: argparse.Namespace) -> int:
    cfg = load_config(*split_config_args(args.config))
    from arl.app.train import LearnerFailed, NonFiniteError, Stopped, train
    from arl.model.checkpoint.store import CheckpointError

    try:
        metrics = train(cfg)
    except Stopped as err:
        print(f"arl: {one_line(str(err))}", file=sys.stderr)
        return 128 + err.signum
    except (NonFiniteError, CheckpointError, LearnerFailed) as err:
        print(f"arl: {one_line(str(err))}", file=sys.stderr)
        return 3
    reward = metrics.get("rollout/reward_mean")  # absent: resumed a finished run
    print(f"done: {cfg.steps} steps" + ("" if reward is None else
                                        f", reward_mean {reward:.3f}"))
    return 0


def _warmstart(args: argparse.Namespace) -> int:
    cfg = load_config(*split_config_args(args.config), check_paths=False)
    from arl.warmstart.build import warmstart

    warmstart(cfg, force=args.force)
    return 0


def _eval(args: argparse.Namespace) -> int:
    from arl.app.eval_command import run_eval

    return run_eval(args)


def _play(args: argparse.Namespace) -> int:
    from arl.app.play import play

    return play(args.checkpoint, args.you, args.dtype)


def _view(args: argparse.Namespace) -> int:
    from arl.app.view import serve

    serve(args.run_dir, args.host, args.port)
    return 0


def _plot(args: argparse.Namespace) -> int:
    from arl.app.plot import plot_run
    from arl.app.report import write_report

    print(plot_run(args.run_dir, args.out))
    print(write_report(args.run_dir))
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from arl.app.doctor import doctor

    return 1 if doctor(*split_config_args(args.config)) else 0


def _plan(args: argparse.Namespace) -> int:
    from arl.app.plan import run_plan

    return run_plan(load_config(*split_config_args(args.config)), args)


def _config(args: argparse.Namespace) -> int:
    from arl.app.config_show import show

    print(show(load_config(*split_config_args(args.config), check_paths=False)), end="")
    return 0


def _export(args: argparse.Namespace) -> int:
    from arl.app.export import export

    print(export(args.checkpoint, args.out_dir, args.dtype))
    return 0


COMMANDS = {"train": _train, "warmstart": _warmstart, "eval": _eval, "play": _play,
            "view": _view, "plot": _plot, "doctor": _doctor, "plan": _plan,
            "config": _config, "export": _export}


if __name__ == "__main__":
    sys.exit(main())

