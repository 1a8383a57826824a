"""The demo on every CPU code path: seeds x {default, ONEDNN_MAX_CPU_ISA=AVX2, bf16}.

    python bench/isa_matrix.py [--seeds 0 1 2] [--variants default avx2 bf16] [--out DIR]
                               [--games VARIANT:SEED ...]

Each cell runs in a process of its own, one after another (never two at once), with the
variant's environment. `default` runs the configs as shipped: float32 throughout, warm start
included. `avx2` caps oneDNN at AVX2 (no AVX-512 kernels). `bf16` does the matrix products in
bf16 where the CPU has bf16 instructions (`auto` dtypes: what the demo did before it chose
float32), warm start included; `bf16_fp32learner` keeps the learner in float32;
`avx512bf16` is `bf16` capped at AVX-512 with bf16 but without AMX (the code path of a CPU
without AMX tiles). A capped variant makes its warm start under the cap too. A cell
warm-starts (once per variant), trains `configs/tictactoe_move.yaml` with its seed, then
scores the final checkpoint greedily on the held-out positions. `--games avx2:0` also runs
the full-games config from that cell's checkpoint and plays 400 greedy games against
eps-minimax(0.3), 200 per seat.

Prints one row per cell: the reward over the last 10 steps, held-out win-in-one and
block-in-one accuracy, and (with games) the illegal-move rate and non-loss rate; a JSON
last line. A cell passes at last-10 >= 0.65 and win/block >= 58 % / 45 %.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

BF16 = ["model.dtype=auto", "learner.compute.dtype=auto"]  # bf16 where the CPU has it
BF16_WARM = ["warmstart.compute_dtype=auto"]
VARIANTS = {  # name -> (environment, train overrides, warm start overrides)
    "default": ({}, [], []),
    "avx2": ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, [], []),
    "bf16": ({}, BF16, BF16_WARM),
    "bf16_fp32learner": ({}, BF16[:1], BF16_WARM),
    "avx512bf16": ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, BF16, BF16_WARM),
}
POSITIONS = {"win": "configs/positions/win_in_one.jsonl",
             "block": "configs/positions/block_in_one.jsonl"}
PASS = {"last10": 0.65, "win": 0.58, "block": 0.45}
GAMES_PER_SEAT = 200
FRESH_SEED = 10**9  # env seeds the run never trained on


def _arl(*args: str, env: dict[str, str]) -> None:
    arl = os.path.join(os.path.dirname(sys.executable), "arl")
    subprocess.run([arl, *args], cwd=ROOT, env=env, check=True)


def run_cell(variant: str, seed: int, out: str, games: bool) -> dict:
    """Warm start (once per variant), train, score; in this process's environment."""
    from arl.app.plot import read_metrics

    environment, train, warm_overrides = VARIANTS[variant]
    capped = environment.get("ONEDNN_MAX_CPU_ISA", "default").lower()
    warm = f"cache:isa-{capped}-{'auto' if warm_overrides else 'float32'}-warmstart-board"
    env = dict(os.environ)
    _arl("warmstart", "configs/warmstart_board.yaml", f"warmstart.output={warm}",
         *warm_overrides, env=env)
    name = f"{variant}_seed{seed}"
    _arl("train", "configs/tictactoe_move.yaml", f"seed={seed}", f"run_name={name}",
         f"output_dir={out}", f"model.path={warm}", "resume=never", "wandb.mode=disabled",
         *train, env=env)
    run = os.path.join(out, name)
    rows = read_metrics(os.path.join(run, "metrics.jsonl"))
    last = [r["rollout/reward_mean"] for r in rows[-10:]]
    cell = {"variant": variant, "seed": seed, "last10": sum(last) / len(last),
            **score(run)}
    if games:
        _arl("train", "configs/tictactoe_board.yaml", f"run_name={name}_games",
             f"output_dir={out}", f"model.path={run}", "resume=never", "wandb.mode=disabled",
             env=env)
        cell.update(full_games(os.path.join(out, f"{name}_games")))
    return cell


def score(run: str) -> dict[str, float]:
    """Greedy held-out win-in-one and block-in-one accuracy of the run's last checkpoint."""
    from arl.config import load_config
    from arl.model.checkpoint.runs import resolve_checkpoint
    from arl.rollout.evaluation import load_policy, read_positions, score_positions
    from arl.types import SamplingParams

    cfg = load_config([os.path.join(run, "config.json")], check_paths=False)
    engine = load_policy(resolve_checkpoint(run))
    greedy = SamplingParams(0.0, 1.0, cfg.rollout.max_new_tokens, FRESH_SEED)
    return {key: score_positions(engine, cfg.env, read_positions(path), 1,
                                 greedy)["accuracy"].rate
            for key, path in POSITIONS.items()}


def full_games(run: str) -> dict[str, float]:
    """Illegal-move and non-loss rates of 400 greedy games against eps-minimax(0.3)."""
    from arl.config import load_config
    from arl.env_spec import resolve_env
    from arl.model.checkpoint.runs import resolve_checkpoint
    from arl.rollout.evaluation import load_policy, play
    from arl.types import SamplingParams

    cfg = load_config([os.path.join(run, "config.json")], check_paths=False)
    engine = load_policy(resolve_checkpoint(run))
    greedy = SamplingParams(0.0, 1.0, cfg.rollout.max_new_tokens, FRESH_SEED)
    outcomes = []
    for seat in ("X", "O"):
        _, game_cfg = resolve_env(cfg.env.name).eval_game(cfg.env, "eps_minimax:0.3", seat)
        outcomes += [t.outcome for t in play(engine, game_cfg, GAMES_PER_SEAT, 1, greedy)]
    results = [o.result if o is not None else None for o in outcomes]
    illegal = sum(r == "invalid" for r in results) / len(results)
    nonloss = sum(r in ("win", "draw") for r in results) / len(results)
    return {"games_illegal": illegal, "games_nonloss": nonloss}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=["default", "avx2", "bf16"],
                        choices=VARIANTS)
    parser.add_argument("--games", nargs="*", default=[], help="VARIANT:SEED cells")
    parser.add_argument("--out", default="runs/isa_matrix")
    parser.add_argument("--cell", nargs=2, help=argparse.SUPPRESS)  # variant seed: one cell
    parser.add_argument("--score", help=argparse.SUPPRESS)  # a finished run: score it alone
    args = parser.parse_args()
    if args.score:
        print(json.dumps(score(args.score)))
        return 0
    if args.cell:
        variant, seed = args.cell[0], int(args.cell[1])
        print(json.dumps(run_cell(variant, seed, args.out, f"{variant}:{seed}" in args.games)))
        return 0
    cells = []
    for variant in args.variants:
        for seed in args.seeds:
            t0 = time.perf_counter()
            env = {**os.environ, **VARIANTS[variant][0]}
            done = subprocess.run([sys.executable, __file__, "--cell", variant, str(seed),
                                   "--out", args.out, "--games", *args.games], cwd=ROOT,
                                  env=env, check=True, stdout=subprocess.PIPE, text=True)
            cell = json.loads(done.stdout.strip().splitlines()[-1])
            cell["minutes"] = (time.perf_counter() - t0) / 60
            cell["passes"] = all(cell[k] >= v for k, v in PASS.items())
            cells.append(cell)
            print(_row(cell), flush=True)
    print(json.dumps(cells))
    return 0 if all(c["passes"] for c in cells) else 1


def _row(c: dict) -> str:
    games = (f"  games illegal {c['games_illegal']:.1%} non-loss {c['games_nonloss']:.1%}"
             if "games_illegal" in c else "")
    return (f"{c['variant']:8s} seed {c['seed']}  last-10 {c['last10']:+.3f}  win "
            f"{c['win']:.1%}  block {c['block']:.1%}{games}  {c['minutes']:.1f} min  "
            f"{'ok' if c['passes'] else 'FAILS'}")


if __name__ == "__main__":
    sys.exit(main())
