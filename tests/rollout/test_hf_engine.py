"""HFEngine on a real tiny Qwen2 model (random init, fixed seed) saved into a temp dir.

The model's init range is wide enough that greedy outputs vary from token to token, so the
checks below (padding invariance, stop ids, top-p) are not trivially satisfied by a model that
repeats one token.
"""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import DynamicCache, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from arl.protocols import RolloutEngine
from arl.rollout.engines import hf
from arl.rollout.engines.hf import HFEngine, _sample_inverse_cdf, _top_p_filter
from arl.types import SamplingParams

VOCAB = 300
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
IM_END = 2


def _save_tiny_model(path, seed: int) -> None:
    """A 2-layer Qwen2 (hidden 64, head size 32, tied embeddings) and a WordLevel tokenizer."""
    words = SPECIALS + [f"w{i}" for i in range(VOCAB - len(SPECIALS))]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token=SPECIALS[0]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    ).save_pretrained(path)
    config = Qwen2Config(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=VOCAB,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        initializer_range=0.3,
        eos_token_id=IM_END,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(path)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """A model this small gains nothing from threads; on a shared CPU they only add waiting."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_a")
    _save_tiny_model(path, seed=0)
    return str(path)


@pytest.fixture(scope="module")
def other_model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_b")
    _save_tiny_model(path, seed=1)
    return str(path)


@pytest.fixture(scope="module")
def fp32(model_dir):
    return HFEngine(model_dir, dtype="float32")


@pytest.fixture(scope="module")
def bf16(model_dir):
    return HFEngine(model_dir, dtype="bfloat16")


def _prompts(n: int, seed: int = 0, low: int = 3, high: int = 40) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, VOCAB, size=int(rng.integers(low, high))).tolist() for _ in range(n)]


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, top_p=1.0, max_new_tokens=n, seed=0)


def _ids(generations) -> list[list[int]]:
    return [g.token_ids.tolist() for g in generations]


def test_protocol_tokenizer_and_default_stop_ids(fp32):
    assert isinstance(fp32, RolloutEngine)
    assert fp32.get_tokenizer() is fp32.tokenizer
    assert fp32.tokenizer.convert_tokens_to_ids("<|im_end|>") == IM_END
    assert fp32.stop_token_ids.tolist() == [IM_END]


def test_greedy_batch_equals_each_prompt_alone(model_dir, fp32):
    prompts = _prompts(6)
    batched = fp32.generate(prompts, _greedy(12))
    assert [len(g.token_ids) for g in batched] == [12] * 6
    assert len({tuple(g.token_ids.tolist()) for g in batched}) > 1
    for prompt, gen in zip(prompts, batched, strict=True):
        alone = fp32.generate([prompt], _greedy(12))[0]
        assert gen.token_ids.tolist() == alone.token_ids.tolist()
        np.testing.assert_allclose(gen.sampler_logprobs, alone.sampler_logprobs, atol=1e-4)
    # Rows that stop early leave the batch; the rows still running must not notice.
    stop = int(batched[0].token_ids[4])
    engine = HFEngine(model_dir, dtype="float32", stop_token_ids=[stop])
    stopped = engine.generate(prompts, _greedy(12))
    assert stopped[0].finished and len(stopped[0].token_ids) <= 5
    for prompt, gen in zip(prompts, stopped, strict=True):
        assert gen.token_ids.tolist() == _ids(engine.generate([prompt], _greedy(12)))[0]


def test_shared_prefixes_prefill_once_and_decode_as_each_prompt_alone(fp32):
    # Two "system prompts" of 30 ids (one per seat), each opening three prompts whose own
    # tails differ in length: the prefill runs each prefix once, then the tails behind a gap.
    rng = np.random.default_rng(11)
    heads = [rng.integers(3, VOCAB, size=30).tolist() for _ in range(2)]
    prompts = [heads[i % 2] + rng.integers(3, VOCAB, size=int(n)).tolist()
               for i, n in enumerate([2, 9, 5, 1, 7, 4])]
    cache = DynamicCache(config=fp32.model.config)
    cut, prefix_of = hf._shared_prefixes(prompts, cache)
    assert cut == 30 and prefix_of.tolist() == [0, 1, 0, 1, 0, 1]
    seen = []
    forward = hf._forward
    with patch.object(hf, "_forward", lambda e, ids, *a: seen.append(ids.shape) or
                      forward(e, ids, *a)):
        batched = fp32.generate(prompts, _greedy(8))
    assert seen[:2] == [(2, 30), (6, 9)]  # the prefixes once, then every tail
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=8, seed=3)
    sampled = fp32.generate(prompts, params)
    with patch.object(hf, "_shared_prefixes", lambda p, c: (0, torch.zeros(0))):
        plain = fp32.generate(prompts, params)
    assert _ids(sampled) == _ids(plain)
    for prompt, gen, a, b in zip(prompts, batched, sampled, plain, strict=True):
        alone = fp32.generate([prompt], _greedy(8))[0]
        assert gen.token_ids.tolist() == alone.token_ids.tolist()
        np.testing.assert_allclose(gen.sampler_logprobs, alone.sampler_logprobs, atol=1e-4)
        np.testing.assert_allclose(a.sampler_logprobs, b.sampler_logprobs, atol=1e-4)


def test_eager_attention_decodes_as_sdpa_does(model_dir, fp32):
    assert fp32.model.config._attn_implementation == "eager"  # the faster one on CPU
    sdpa = HFEngine(model_dir, dtype="float32")
    sdpa.model.set_attn_implementation("sdpa")
    prompts = _prompts(6, seed=5)
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=12, seed=7)
    eager_out, sdpa_out = fp32.generate(prompts, params), sdpa.generate(prompts, params)
    assert _ids(eager_out) == _ids(sdpa_out)
    for a, b in zip(eager_out, sdpa_out, strict=True):
        np.testing.assert_allclose(a.sampler_logprobs, b.sampler_logprobs, atol=1e-4)


def test_chunking_by_max_batch_size_keeps_order(model_dir, fp32):
    prompts = _prompts(7, seed=3)
    small = HFEngine(model_dir, dtype="float32", max_batch_size=3)
    assert _ids(small.generate(prompts, _greedy(6))) == _ids(fp32.generate(prompts, _greedy(6)))


def test_same_seed_same_output_and_other_seed_differs(bf16):
    prompts = _prompts(8, seed=1)
    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=10, seed=7)
    first, again = bf16.generate(prompts, params), bf16.generate(prompts, params)
    assert _ids(first) == _ids(again)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a.sampler_logprobs, b.sampler_logprobs)
    other = bf16.generate(prompts, SamplingParams(1.0, 1.0, 10, seed=8))
    assert _ids(other) != _ids(first)


@pytest.mark.parametrize(
    ("engine_name", "atol", "temperature", "top_p"),
    [
        ("fp32", 1e-4, 0.7, 0.9),
        ("fp32", 1e-4, 0.0, 1.0),  # greedy: logprobs under temperature 1
        # bf16 logits of |x| ~ 5 are quantised in steps of ~0.03, and the cached and the
        # full-pass computations round differently: bound the worst token loosely, the mean tightly.
        ("bf16", 5e-2, 1.0, 0.8),
    ],
)
def test_logprobs_match_a_full_forward_pass(request, engine_name, atol, temperature, top_p):
    engine = request.getfixturevalue(engine_name)
    prompts = _prompts(5, seed=2)
    params = SamplingParams(temperature, top_p, max_new_tokens=10, seed=3)
    scale = temperature if temperature > 0 else 1.0
    for prompt, gen in zip(prompts, engine.generate(prompts, params), strict=True):
        ids = torch.tensor([prompt + gen.token_ids.tolist()])
        with torch.inference_mode():
            logits = engine.model(input_ids=ids).logits[0].float()
        logp = torch.log_softmax(logits[len(prompt) - 1 : -1] / scale, dim=-1)
        expected = logp.gather(1, torch.from_numpy(gen.token_ids).long()[:, None]).squeeze(1)
        assert gen.sampler_logprobs.dtype == np.float32 and gen.token_ids.dtype == np.int32
        np.testing.assert_allclose(gen.sampler_logprobs, expected.numpy(), atol=atol)
        assert np.abs(gen.sampler_logprobs - expected.numpy()).mean() < min(atol, 1e-2)


def test_stop_id_ends_a_row_and_max_new_tokens_cuts_it(model_dir, fp32):
    prompt = _prompts(1, seed=4)[0]
    free = fp32.generate([prompt], _greedy(10))[0]
    assert not free.finished and len(free.token_ids) == 10
    ids = free.token_ids.tolist()
    stop = ids[3]
    engine = HFEngine(model_dir, dtype="float32", stop_token_ids=[stop])
    gen = engine.generate([prompt], _greedy(10))[0]
    assert gen.finished
    assert gen.token_ids.tolist() == ids[: ids.index(stop) + 1]
    assert len(gen.sampler_logprobs) == len(gen.token_ids)
    # A stop id sampled as the very last allowed token still counts as finished.
    exact = engine.generate([prompt], _greedy(ids.index(stop) + 1))[0]
    assert exact.finished and exact.token_ids.tolist() == gen.token_ids.tolist()
    cut = engine.generate([prompt], _greedy(ids.index(stop)))[0]
    assert not cut.finished and len(cut.token_ids) == ids.index(stop)


def test_tiny_top_p_is_greedy(fp32):
    prompts = _prompts(6, seed=5)
    nucleus = fp32.generate(prompts, SamplingParams(1.0, 1e-6, max_new_tokens=8, seed=11))
    assert _ids(nucleus) == _ids(fp32.generate(prompts, _greedy(8)))


def test_sampler_frequencies_follow_probs_and_skip_zero_mass():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0]]).repeat(40_000, 1) * 3.0  # unnormalised
    ids = _sample_inverse_cdf(probs, torch.Generator().manual_seed(0))
    counts = torch.bincount(ids, minlength=5).float() / len(ids)
    assert counts[1] == 0 and counts[4] == 0
    np.testing.assert_allclose(counts.numpy(), [0.5, 0.0, 0.3, 0.2, 0.0], atol=0.01)


def test_top_p_filter_keeps_the_smallest_nucleus():
    logp = torch.tensor([[0.15, 0.5, 0.05, 0.3]]).log()
    kept = torch.isfinite(_top_p_filter(logp, 0.7))
    assert kept.tolist() == [[False, True, False, True]]  # 0.5 + 0.3 reaches 0.7
    assert torch.isfinite(_top_p_filter(logp, 1e-6)).sum() == 1
    assert torch.isfinite(_top_p_filter(logp, 0.99)).all()


def _numpy_state(model_dir) -> dict[str, np.ndarray]:
    model = Qwen2ForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return {k: v.numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("drop", [None, "lm_head.weight", "model.embed_tokens.weight"])
def test_update_weights_loads_another_model(model_dir, other_model_dir, drop):
    prompts = _prompts(4, seed=6)
    target = _ids(HFEngine(other_model_dir, dtype="float32").generate(prompts, _greedy(8)))
    engine = HFEngine(model_dir, dtype="float32")
    assert _ids(engine.generate(prompts, _greedy(8))) != target
    state = _numpy_state(other_model_dir)
    if drop is not None:  # tied embeddings: either name alone is enough
        del state[drop]
    engine.update_weights(state, version=5)
    assert engine.version == 5
    assert engine.model.lm_head.weight is engine.model.model.embed_tokens.weight
    assert _ids(engine.generate(prompts, _greedy(8))) == target


def test_update_weights_casts_to_bf16(model_dir, other_model_dir):
    engine = HFEngine(model_dir, dtype="bfloat16")
    engine.update_weights(_numpy_state(other_model_dir), version=1)
    assert engine.model.model.embed_tokens.weight.dtype == torch.bfloat16
    reference = HFEngine(other_model_dir, dtype="bfloat16")
    prompts = _prompts(3, seed=7)
    assert _ids(engine.generate(prompts, _greedy(6))) == _ids(
        reference.generate(prompts, _greedy(6))
    )


def test_update_weights_rejects_wrong_keys_and_shapes(model_dir, other_model_dir):
    engine = HFEngine(model_dir, dtype="float32", version=3)
    prompts = _prompts(3, seed=8)
    before = _ids(engine.generate(prompts, _greedy(6)))
    state = _numpy_state(other_model_dir)
    extra = dict(state, **{"model.bogus.weight": np.zeros(3, np.float32)})
    missing = {k: v for k, v in state.items() if k != "model.norm.weight"}
    shaped = dict(state, **{"model.norm.weight": np.zeros(7, np.float32)})
    for bad in (extra, missing, shaped):
        with pytest.raises(ValueError):
            engine.update_weights(bad, version=4)
    assert engine.version == 3
    assert _ids(engine.generate(prompts, _greedy(6))) == before  # nothing was half-loaded


def test_rejects_bad_arguments(model_dir, fp32):
    with pytest.raises(ValueError):
        HFEngine(model_dir, dtype="float16")
    with pytest.raises(ValueError):
        fp32.generate([[]], _greedy(3))
    with pytest.raises(ValueError):
        fp32.generate([[5]], SamplingParams(1.0, 0.0, 3, 0))
