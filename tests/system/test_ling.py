"""The Ling-3.0 architecture (`bailing_hybrid`: linear KDA + MLA attention, mixture of experts)
through the whole loop on CPU: Ray actors, the HF engine, GSPO steps, weight sync, checkpoint."""

from __future__ import annotations

import pytest
import transformers

from arl.app.train import train
from arl.envs.registry import env_config
from tests.builders import ci_config, metrics_rows

pytestmark = [
    pytest.mark.slow,  # about a minute: the KDA layers run through transformers' torch path
    pytest.mark.skipif(
        not hasattr(transformers, "BailingHybridConfig"),
        reason=f"transformers {transformers.__version__} lacks bailing_hybrid (needs >= 5.24)",
    ),
]


@pytest.fixture(scope="module")
def ling_model_dir(tmp_path_factory) -> str:
    """A tiny random bailing_hybrid model with a short supervised pass, so that its rollouts mix
    valid and invalid calls and the learner gets non-zero advantages."""
    from arl.model.tiny import build_tiny_model, build_tokenizer, save_model_dir
    from arl.warmstart.demos import corpus_texts, warmstart_examples
    from arl.warmstart.sft import supervised_finetune

    tokenizer = build_tokenizer(corpus_texts(seed=0), 400)
    model = build_tiny_model(tokenizer, hidden_size=64, num_layers=2, num_heads=2, seed=0,
                             architecture="bailing_hybrid")
    assert model.config.layer_types == ["linear_attention", "full_attention"]
    assert model.config.mlp_layer_types == ["dense", "sparse"]
    demos = warmstart_examples(env_config(), 384, seed=0, malformed_fraction=0.2,
                               illegal_fraction=0.3)
    examples = [(d.reset.messages, d.reset.tools, d.target) for d in demos]
    supervised_finetune(model, tokenizer, examples, epochs=2, lr=1e-2, batch_size=16, seed=0)
    path = str(tmp_path_factory.mktemp("models") / "tiny-ling")
    save_model_dir(model, tokenizer, path)
    return path


def test_tiny_ling_model_trains_on_ray(tmp_path, ling_model_dir):
    from safetensors.torch import load_file

    from arl.model.causal_lm import load_model

    cfg = ci_config(ling_model_dir, tmp_path, "rollout.group_size=8", "rollout.max_new_tokens=32")
    train(cfg)
    rows = metrics_rows(tmp_path / "ci")
    assert [r["step"] for r in rows] == [0, 1, 2]
    # The engine and the learner compute the same log-probs, expert routing included.
    assert all(r["rollout/sampler_logprob_gap"] < 0.05 for r in rows), rows
    assert any(r["learner/grad_norm"] > 0 for r in rows), "some group had reward variance"

    # The folder stores checkpoint names (per-expert tensors, `attention.dense`); the learner
    # checkpoints the in-memory module names, which is what loading the folder gives.
    model, _ = load_model(ling_model_dir, dtype="float32")
    before = {k: v.detach() for k, v in model.named_parameters()}
    after = load_file(str(tmp_path / "ci" / "checkpoints" / "step_000003" / "model.safetensors"))
    assert set(before) <= set(after)
    changed = {k for k in before if not before[k].float().equal(after[k].float())}
    expert = "model.layers.1.mlp.experts.gate_up_proj"
    assert expert in changed, "the routed experts were trained"
    assert any("self_attn.f_proj" in k or "forget_gate" in k for k in changed), "KDA trained"
