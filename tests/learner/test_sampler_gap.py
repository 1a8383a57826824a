"""The train/inference gap, measured every step: the largest and the mean difference between
the log-probs the rollout engine sampled with and the learner's recomputation on the same
weights. The HF engine in float32, on the weights the learner holds, matches the learner's
recomputation to float32 rounding; in bfloat16 the gap is visible."""

from __future__ import annotations

from arl.actors.hosts import LocalHost
from arl.app.train import train
from tests.builders import ci_config, metrics_rows

# float32 rounding of a log-softmax over the tiny vocabulary, computed two ways (a KV-cached
# decode against one pass over the whole sequence): measured 0 to 5e-7 a token.
FP32_ROUNDING = 1e-5


def _gaps(tmp_path, model_dir, dtype: str) -> list[tuple[float, float]]:
    cfg = ci_config(model_dir, tmp_path, f"model.dtype={dtype}",
                    "learner.compute.dtype=float32", "steps=2")
    train(cfg, host=LocalHost())
    return [(r["rollout/sampler_logprob_gap"], r["rollout/sampler_logprob_gap_max"])
            for r in metrics_rows(tmp_path / "ci")]


def test_the_hf_engine_in_float32_samples_the_learners_log_probs(tmp_path, warm_model_dir):
    gaps = _gaps(tmp_path, warm_model_dir, "float32")
    assert len(gaps) == 2
    for mean, largest in gaps:
        assert 0.0 <= mean <= largest <= FP32_ROUNDING, gaps


def test_a_bfloat16_engine_shows_a_gap(tmp_path, warm_model_dir):
    gaps = _gaps(tmp_path, warm_model_dir, "bfloat16")
    assert all(largest > 100 * FP32_ROUNDING and 0 < mean < largest for mean, largest in gaps), gaps
