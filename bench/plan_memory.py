"""`arl plan`'s learner estimate against measurement: peak memory of one forward+backward.

Usage: python bench/plan_memory.py [MODEL_DIR]   (default: the warm-start model)
Each (micro-batch, sequence length) runs in a fresh process (so no allocator cache hides the
peak) and reports its peak RSS growth over the loaded model; the plan's activations + logits
estimate is printed beside it. The last line is JSON with the estimate/measured ratios.
"""

from __future__ import annotations

import json
import subprocess
import sys

from arl.app.plan import activation_bytes, logits_bytes, model_shape

MODEL = sys.argv[1] if len(sys.argv) > 1 else "cache:tiny-warmstart"
SHAPES = ((16, 133), (64, 133), (16, 512))
PROBE = """
import gc, resource, sys, torch
torch.set_num_threads(1)
from arl.model.causal_lm import load_model, token_logprobs
model, _ = load_model(sys.argv[1], "float32")
model.train()
b, t = int(sys.argv[2]), int(sys.argv[3])
ids = torch.randint(0, model.config.vocab_size, (b, t))
gc.collect()
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
token_logprobs(model, ids, torch.ones(b, t, dtype=torch.long), 1.0).sum().backward()
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)
"""


def estimate(shape, b: int, t: int) -> int:
    """The plan's learner activations + logits (arl/app/plan.py), gradients included here
    because the probe's peak includes their allocation."""
    return activation_bytes(shape, b, t) + logits_bytes(shape, b, t) + 4 * shape.params


def main() -> None:
    shape = model_shape(MODEL)
    ratios = {}
    for b, t in SHAPES:
        out = subprocess.run([sys.executable, "-c", PROBE, MODEL, str(b), str(t)],
                             capture_output=True, text=True, check=True)
        measured = int(out.stdout.split()[-1])
        ratio = estimate(shape, b, t) / measured
        ratios[f"b{b}_t{t}"] = round(ratio, 3)
        print(f"b={b:3d} T={t:4d}  measured {measured / 2**20:7.1f} MiB  "
              f"plan {estimate(shape, b, t) / 2**20:7.1f} MiB  ratio {ratio:.2f}")
    print(json.dumps({"estimate_over_measured": ratios}))


if __name__ == "__main__":
    main()
