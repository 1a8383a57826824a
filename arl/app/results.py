"""The documentation's results pages, generated from runs: `python -m arl.app.results
docs/results.yaml` (`make results`) reads each page's run directory and writes
docs/results/<page>.md with its curves.

A page puts the run's training curve beside the baselines it must be read against, all on
the run's own reward table and the same fresh start states: a uniformly random legal player,
perfect play, the warm start and the final checkpoint (greedy), then the held-out positions
files and full games against fixed opponents. It ends with how it was made: the command,
the machine, the package versions and the date.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

import numpy as np
import yaml

from arl.app.jsonl import json_rows
from arl.config import Config, EnvConfig, load_config
from arl.env_spec import resolve_env
from arl.model.checkpoint.runs import resolve_checkpoint, saved_step
from arl.model.source import local_folder
from arl.rollout.evaluation import Rate, load_policy, play, read_positions, score_positions
from arl.rollout.reference import has_player, play_reference, reference_positions
from arl.types import Outcome, SamplingParams

FRESH_SEED = 10**9  # start states from here on: far from any a run trains on
PACKAGES = ("torch", "transformers", "ray", "numpy")


@dataclass(frozen=True)
class PageSpec:
    """One results page (a mapping in the results file)."""

    page: str  # file name under the output folder, without .md
    title: str
    command: str  # what made the run, as a user types it
    run: str  # the run directory
    warm_start: str = ""  # the model the run started from (anything model.path takes)
    about: str = ""  # one paragraph: what the run is
    episodes: int = 400  # fresh start states per policy
    positions: list[str] = field(default_factory=list)  # held-out positions files
    opponents: list[str] = field(default_factory=list)  # full games against these, each seat
    games: int = 100  # per opponent and seat
    max_new_tokens: int = 48
    outcomes: list[str] = field(default_factory=list)  # outcome kinds: their greedy rates
    turns: bool = False  # the mean number of turns an episode takes, greedy


def read_specs(path: str) -> list[PageSpec]:
    with open(path, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    return [PageSpec(**page) for page in data["pages"]]


def training_table(rows: list[dict]) -> list[str]:
    """First 5 steps, last 10, and the best 10-step mean of the reward and every rate."""
    keys = ["rollout/reward_mean", "rollout/invalid_tool_call_rate", "game/illegal_rate"]
    keys += sorted(k for k in rows[0] if k.startswith("rollout/outcome_"))
    out = ["| metric | first 5 steps | last 10 steps | best 10-step mean |", "|---|---|---|---|"]
    for key in (k for k in keys if k in rows[0]):
        values = np.array([r[key] for r in rows], dtype=float)
        windows = np.convolve(values, np.ones(10) / 10, "valid") if len(values) >= 10 else values
        out.append(f"| `{key}` | {values[:5].mean():.3f} | {values[-10:].mean():.3f} | "
                   f"{windows.max():.3f} |")
    return out


def _rate(rate: Rate) -> str:
    return f"{rate.rate:.1%} ({rate.count}/{rate.total})"


def _policy_rows(spec: PageSpec, cfg: Config) -> list[tuple[str, list[str]]]:
    """(label, cells) per policy: reward on fresh start states (greedy, then sampled at the
    run's temperature), each positions file, the non-loss rate against each opponent in
    each seat."""
    env_cfg = cfg.env
    env = resolve_env(env_cfg.name)
    files = {p: read_positions(p) for p in spec.positions}
    rows = []
    for player, label in (("random", "uniformly random legal"), ("perfect", "perfect play")):
        if not has_player(env, player):
            continue
        played = play_reference(env_cfg, player, spec.episodes, FRESH_SEED)
        cells = [f"{np.mean([p.reward for p in played]):+.3f}"] * 2  # it does not sample
        cells += _episode_cells(spec, [(p.outcome, p.turns) for p in played])
        cells += [_rate(reference_positions(env_cfg, rows_, player, FRESH_SEED)["accuracy"])
                  for rows_ in files.values()]
        cells += [_reference_games(env_cfg, opponent, seat, player, spec.games)
                  for opponent in spec.opponents for seat in ("X", "O")]
        rows.append((label, cells))
    final = resolve_checkpoint(spec.run)
    policies = [(f"warm start (`{spec.warm_start}`)", local_folder(spec.warm_start))
                ] if spec.warm_start else []
    policies.append((f"final checkpoint (step {saved_step(final)})", final))
    for label, path in policies:
        rows.append((label, _model_cells(spec, cfg, load_policy(path), files)))
    return rows


def _episode_cells(spec: PageSpec, ended: list[tuple[Outcome | None, int]]) -> list[str]:
    """The rate of each of the page's outcome kinds and, where asked, the mean number of
    turns, from (outcome, turns) per episode."""
    cells = [_rate(Rate(sum(o is not None and o.kind == kind for o, _ in ended), len(ended)))
             for kind in spec.outcomes]
    return cells + ([f"{np.mean([n for _, n in ended]):.2f}"] if spec.turns else [])


def _nonloss(results: list) -> str:
    won = sum(r is not None and r.result in ("win", "draw") for r in results)
    return _rate(Rate(won, len(results)))


def _reference_games(env_cfg: EnvConfig, opponent: str, seat: str, player: str,
                     games: int) -> str:
    _, cfg = resolve_env(env_cfg.name).eval_game(env_cfg, opponent, seat)
    return _nonloss([p.outcome for p in play_reference(cfg, player, games, FRESH_SEED)])


def _model_cells(spec: PageSpec, cfg: Config, engine, files: dict) -> list[str]:
    env_cfg = cfg.env
    greedy = SamplingParams(0.0, 1.0, spec.max_new_tokens, FRESH_SEED)
    sampled = SamplingParams(cfg.rollout.temperature, cfg.rollout.top_p, spec.max_new_tokens,
                             FRESH_SEED)
    played = [play(engine, env_cfg, spec.episodes, 1, p) for p in (greedy, sampled)]
    cells = [f"{np.mean([t.reward for t in episodes]):+.3f}" for episodes in played]
    cells += _episode_cells(spec, [(t.outcome, t.num_turns) for t in played[0]])
    cells += [_rate(score_positions(engine, env_cfg, rows, 1, greedy)["accuracy"])
              for rows in files.values()]
    for opponent in spec.opponents:
        for seat in ("X", "O"):
            _, cfg = resolve_env(env_cfg.name).eval_game(env_cfg, opponent, seat)
            cells.append(_nonloss([t.outcome for t in play(engine, cfg, spec.games, 1, greedy)]))
    return cells


def baselines_table(spec: PageSpec, cfg: Config) -> list[str]:
    heads = [f"reward, greedy ({spec.episodes} fresh start states)",
             f"reward, sampled at T = {cfg.rollout.temperature:g}"]
    heads += [f"{kind}, greedy" for kind in spec.outcomes]
    heads += ["turns an episode, greedy"] if spec.turns else []
    heads += [f"{os.path.splitext(os.path.basename(p))[0]} (held out)" for p in spec.positions]
    heads += [f"not lost vs {o} as {seat}" for o in spec.opponents for seat in ("X", "O")]
    out = ["| policy | " + " | ".join(heads) + " |", "|---" * (len(heads) + 1) + "|"]
    out += [f"| {label} | " + " | ".join(cells) + " |"
            for label, cells in _policy_rows(spec, cfg)]
    return out


def _machine() -> str:
    """The CPU (model name, cores, the bf16 and AMX instructions the learner's arithmetic
    depends on) and the OS."""
    cpu, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    cpu = value.strip()
                elif key.strip() in ("flags", "Features"):
                    flags = set(value.split())
    except OSError:
        pass
    isa = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "bf16") if f in flags]
    return (f"{cpu}, {os.cpu_count()} CPUs ({', '.join(isa) or 'no AVX2'}), "
            f"{platform.system()} {platform.release()}")


def provenance(spec: PageSpec, results_file: str) -> list[str]:
    versions = []
    for name in ("arl", *PACKAGES):
        try:
            versions.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            continue
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    return ["## How this page was made", "",
            f"- the run: `{spec.command}` (run directory `{spec.run}`)",
            f"- this page: `python -m arl.app.results {results_file}` (`make results`), "
            f"on {datetime.date.today().isoformat()}, arl commit {commit}",
            f"- machine: {_machine()}",
            f"- packages: {', '.join(versions)}; Python {platform.python_version()}",
            f"- reference players and greedy policies play the same start states (env "
            f"seeds from {FRESH_SEED}), on the run's own env config and reward table", ""]


def _baselines_intro(spec: PageSpec) -> str:
    then = [what for what, present in (("positions the run never trained on",
                                        spec.positions),
                                       ("full games against fixed opponents", spec.opponents))
            if present]
    return ("The same fresh start states for every policy" +
            (f", then {' and '.join(then)}, greedy." if then else "."))


def write_page(spec: PageSpec, folder: str, results_file: str) -> str:
    """Write `folder`/<page>.md (and its curves); return its path."""
    cfg = load_config([os.path.join(spec.run, "config.json")], check_paths=False)
    rows = [row for _, row in json_rows(os.path.join(spec.run, "metrics.jsonl"))]
    figure = f"{spec.page}.png"
    shutil.copyfile(os.path.join(spec.run, "curves.png"), os.path.join(folder, figure))
    lines = [f"# {spec.title}", "", spec.about, "", f"![{spec.title}: curves]({figure})", "",
             f"## Training ({len(rows)} steps)", "", *training_table(rows), "",
             "## Against the baselines", "", _baselines_intro(spec), "",
             *baselines_table(spec, cfg), "", *provenance(spec, results_file)]
    path = os.path.join(folder, f"{spec.page}.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines).rstrip() + "\n")
    return path


def write_index(specs: list[PageSpec], folder: str, results_file: str) -> None:
    """`folder`/index.md: every page of the results file, linked where it was generated."""
    lines = ["# Results", "",
             "Each page is generated from a run (`make results`, from "
             f"`{results_file}`): the run's curve beside a uniformly random legal player, "
             "perfect play, the warm start and the final checkpoint, on the run's own reward "
             "table, then positions and games it never trained on. A curve that rises because "
             "malformed calls vanish is format learning: the baselines say how much of a rise "
             "is play.", "", "| page | made by |", "|---|---|"]
    for spec in specs:
        made = os.path.isfile(os.path.join(folder, f"{spec.page}.md"))
        name = f"[{spec.title}]({spec.page}.md)" if made else f"{spec.title} (not generated yet)"
        lines.append(f"| {name} | `{spec.command}` |")
    lines += ["", "How the recipes were found, and what each choice was worth: the "
              "[measurement notes](notes.md).", ""]
    with open(os.path.join(folder, "index.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m arl.app.results",
        description="Write docs/results/<page>.md for each page whose run directory exists.")
    parser.add_argument("results_file", nargs="?", default="docs/results.yaml")
    parser.add_argument("folder", nargs="?", help="default: results/ beside results_file")
    parser.add_argument("--page", action="append", default=[],
                        help="only this page (repeatable); default: every page")
    args = parser.parse_args(argv)
    results_file = args.results_file
    folder = args.folder or os.path.join(os.path.dirname(results_file), "results")
    if not os.path.isfile(results_file):
        parser.error(f"{results_file}: no such file")  # one line, exit 2
    os.makedirs(folder, exist_ok=True)
    specs = read_specs(results_file)
    unknown = sorted(set(args.page) - {s.page for s in specs})
    if unknown:
        parser.error(f"--page {', '.join(unknown)}: not a page of {results_file}")
    for spec in specs:
        if args.page and spec.page not in args.page:
            continue
        if not os.path.isfile(os.path.join(spec.run, "metrics.jsonl")):
            print(f"{spec.page}: no run at {spec.run}; `{spec.command}` makes it", flush=True)
            continue
        print(f"{spec.page}: {write_page(spec, folder, results_file)}", flush=True)
    write_index(specs, folder, results_file)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
