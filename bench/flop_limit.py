"""This CPU's matrix-product throughput, and a training step's FLOPs: the floor under a step.

Usage: python bench/flop_limit.py [MODEL] [--threads N]   (default cache:tiny-warmstart)

`matmul_peak` times torch.mm in bfloat16 and float32 on the model's own shapes (a batch of
tokens through its MLP: [T, hidden] x [hidden, intermediate]) and on one large square
product, and keeps the best GFLOPS per dtype. `step_flops` counts a sync step's nominal
work: 2 FLOPs per parameter per token for every token generated or prefilled, 6 for every
token trained forward and backward, and 2 more for the no-grad pass of the old log-probs
(what a step costs without arl's savings: shared prompts, head on completions only).
`bench/loop.py` divides the step's time by that work at the measured peak: its
`flop_limit_ratio`. The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

LARGE = 2048


def gflops(m: int, k: int, n: int, dtype: torch.dtype, repeats: int = 5) -> float:
    """Best GFLOPS of [m, k] x [k, n] in `dtype` over `repeats` timed products."""
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2 * m * k * n / best / 1e9


def matmul_peak(hidden: int, intermediate: int, tokens: int = 2048) -> dict[str, float]:
    """{dtype: best GFLOPS} over the model's MLP shape and a large square product."""
    out = {}
    for name, dtype in (("bfloat16", torch.bfloat16), ("float32", torch.float32)):
        out[name] = max(gflops(tokens, hidden, intermediate, dtype),
                        gflops(LARGE, LARGE, LARGE, dtype))
    return out


def step_flops(parameters: int, served_tokens: float, trained_tokens: float) -> float:
    """A sync step's nominal FLOPs: `served_tokens` (prefilled + generated) forward once,
    `trained_tokens` forward, backward and one more forward for the old log-probs."""
    return 2 * parameters * served_tokens + 8 * parameters * trained_tokens


def model_shape(path: str) -> tuple[int, int, int]:
    """(parameters, hidden size, MLP width) of the model at `path`."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    parameters = sum(p.numel() for p in model.parameters())
    return parameters, config.hidden_size, getattr(config, "intermediate_size",
                                                   4 * config.hidden_size)


def main() -> None:
    from arl.model.source import local_folder
    from arl.model_source import local_path

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default="cache:tiny-warmstart")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    parameters, hidden, intermediate = model_shape(local_folder(local_path(args.model)))
    peak = matmul_peak(hidden, intermediate)
    print(f"{args.model}: {parameters / 1e6:.2f}M parameters; matrix products at best "
          f"{peak['bfloat16']:.0f} GFLOPS in bf16, {peak['float32']:.0f} in fp32 "
          f"({args.threads} threads)")
    print(json.dumps({"model": args.model, "parameters": parameters, "peak_gflops": peak,
                      "threads": args.threads}))


if __name__ == "__main__":
    main()
