"""DeepSpeed takes the learner's compute dtype: in bfloat16 the matrix products inside its
forward run in bf16, the output head and the gradient reductions stay fp32. DeepSpeed turns
off a CUDA autocast it was not told of (a CPU one it leaves alone), so the engine itself
must be told: its `torch_autocast` section."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.builders import random_trajectories, tiny_learner


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_deepspeed_runs_the_products_in_the_compute_dtype(tiny_model_dir, dtype):
    pytest.importorskip("deepspeed")
    learner = tiny_learner(tiny_model_dir, backend="deepspeed", zero_stage=2, dtype=dtype)
    seen: dict[str, torch.dtype] = {}
    model = learner.backend.module.module  # the engine's model
    linears = [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]

    def note(name: str):
        def hook(_module, _inputs, out) -> None:
            seen.setdefault(name, out.dtype)
        return hook

    for name, module in linears:
        module.register_forward_hook(note(name))
    trajectories = random_trajectories(8, 0, vocab=300, min_len=12, max_len=29)
    metrics = learner.step(trajectories, np.array([1.0, -1.0] * 4, dtype=np.float32))
    assert np.isfinite(metrics["learner/loss"])
    assert learner.backend.engine.torch_autocast_enabled() == (dtype == "bfloat16")
    head = next(n for n, m in linears if m is model.get_output_embeddings())
    products = {seen[n] for n, _ in linears if n != head}
    assert products == {torch.bfloat16 if dtype == "bfloat16" else torch.float32}
    assert seen[head] == torch.float32  # log-probs from fp32 logits
    assert all(p.dtype == torch.float32 and not hasattr(p, "comm_dtype")
               for p in model.parameters())  # fp32 master weights, fp32 reductions
