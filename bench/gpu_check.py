"""`make gpu-check`: every GPU path of arl, in order, in one run of at most about 10 minutes on
one H100, H200 or GB10, stopping at the first failure with one line.

    python bench/gpu_check.py [--out FILE] [--model REF] [--dry-run] [--cpu]

Steps (bench/gpu_check_steps.py): versions and vLLM's weight-reload signature; the GPU tests
(tests/system/test_gpu.py); the rollout engine from a model built here; 3 training steps of
configs/gpu_one.yaml; DeepSpeed ZeRO-3 in bf16, checking the dtype its products really ran
in; weight sync over NCCL with 1 and 2 rollout workers; the weight-sync time of a
0.5B-parameter model; generation tokens/s against bare vLLM. A step that needs more GPUs
than the machine has is skipped, saying so.

It writes a JSON report (`--out`, default gpu_check.json) and prints a one-screen summary.
Exit status: 0 all passed or skipped, 1 a step failed (its one line says which and why), 2
no CUDA GPU here (one line; nothing runs). `--dry-run` lists the steps and what each needs.
`--cpu` runs the same driver on the CPU, each step on the CPU engine and gloo where its code
path allows (the others are skipped): how the test suite runs this script before any GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # bench/ for its steps

from gpu_check_more import MORE_STEPS  # noqa: E402
from gpu_check_steps import FIRST_STEPS, Context, Skip  # noqa: E402

STEPS = FIRST_STEPS + MORE_STEPS


@dataclass
class Outcome:
    step: str
    status: str  # passed | failed | skipped
    seconds: float
    figures: dict = field(default_factory=dict)
    reason: str = ""  # why it was skipped or failed: one line


def run_steps(ctx: Context, names: list[str] | None = None) -> list[Outcome]:
    """Run the steps in order (or those named), stopping after the first failure."""
    outcomes = []
    for step in STEPS:
        if names and step.name not in names:
            continue
        print(f"--- {step.name}: {step.what}", flush=True)
        start = time.perf_counter()
        try:
            figures = step.run(ctx)
            outcome = Outcome(step.name, "passed", 0.0, figures or {})
        except Skip as skip:
            outcome = Outcome(step.name, "skipped", 0.0, reason=str(skip))
        except Exception as err:  # noqa: BLE001 - every failure becomes the report's line
            traceback.print_exc()
            outcome = Outcome(step.name, "failed", 0.0, reason=one_line(err))
        outcome.seconds = round(time.perf_counter() - start, 1)
        outcomes.append(outcome)
        if outcome.status == "failed":
            break
    return outcomes


def one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[-1] if text else ''}"[:300]


def summary(ctx: Context, outcomes: list[Outcome]) -> str:
    lines = [f"gpu-check on {ctx.machine()}"]
    for o in outcomes:
        detail = o.reason or ", ".join(f"{k} {v}" for k, v in o.figures.items())
        lines.append(f"  {o.status:7s} {o.step:18s} {o.seconds:6.1f} s  {detail}"[:160])
    ran = {o.step for o in outcomes}
    lines += [f"  not run {s.name}" for s in STEPS if s.name not in ran]
    return "\n".join(lines)


def dry_run() -> str:
    lines = ["gpu-check steps, in order (a failure stops the run):"]
    for i, step in enumerate(STEPS, 1):
        lines.append(f"{i}. {step.name}: {step.what}\n   needs: {step.needs}")
    return "\n".join(lines)


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:  # not even torch: certainly no GPU path to check
        return False
    return torch.cuda.is_available()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="gpu_check.json", help="the JSON report")
    parser.add_argument("--model", default="", help="model for the training step (default: "
                        "a model built here from a config, as nothing is downloaded)")
    parser.add_argument("--dry-run", action="store_true", help="list the steps and exit")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU (tests)")
    parser.add_argument("--only", nargs="*", default=None, help="run these steps alone")
    args = parser.parse_args(argv)
    if args.dry_run:
        print(dry_run())
        return 0
    if not args.cpu and not cuda_available():
        print("gpu-check: no CUDA GPU here (torch sees none); `--dry-run` lists the steps",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        ctx = Context(device="cpu" if args.cpu else "cuda", scratch=scratch, model=args.model)
        outcomes = run_steps(ctx, args.only)
        report = {"machine": ctx.machine(), "versions": ctx.versions,
                  "steps": [asdict(o) for o in outcomes]}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    print(summary(ctx, outcomes))
    failed = [o for o in outcomes if o.status == "failed"]
    if failed:
        print(f"gpu-check: {failed[0].step} failed: {failed[0].reason}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
