"""The tiny offline model: tokenizer, chat template, token-exact turns, model build/save/load,
and per-token log-probs."""

from __future__ import annotations

import json
import os
import unicodedata

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import arl.model.causal_lm as model_module
from arl.model.causal_lm import load_model, set_torch_threads, token_logprobs
from arl.model.tiny import (
    IM_END,
    SPECIAL_TOKENS,
    TOOL_TOKENS,
    build_tiny_model,
    build_tokenizer,
    render_chat,
    save_model_dir,
)
from arl.types import Message, ToolSchema
from tests.builders import TOOL

SYSTEM = Message("system", "You play tic-tac-toe as X. Reply with one choose_square tool call.")
CALL = '<tool_call>{"name": "choose_square", "arguments": {"square": %d}}</tool_call>'

# Multi-turn conversations that exercise every seam: calls, tool results, plain replies,
# replies starting with spaces/punctuation, and a tool message followed by a user message.
CONVERSATIONS = [
    [SYSTEM, Message("user", "X|2|O\n4|X|6\n7|8|O\nYou are X. Your move."),
     Message("assistant", CALL % 4), Message("tool", "Square 4 is taken."),
     Message("assistant", CALL % 6), Message("tool", "ok"), Message("user", "O played 2."),
     Message("assistant", "I win!")],
    [SYSTEM, Message("user", "1|2|3\n4|5|6\n7|8|9\nYou are X. Your move."),
     Message("assistant", "  hmm " + CALL % 5), Message("tool", '{"error": "trailing"}'),
     Message("assistant", "...\n" + CALL % 1)],
    [Message("user", "hi"), Message("assistant", "hello there"), Message("user", "again\n"),
     Message("assistant", "\tüñï 🙂")],
]
TEXTS = [
    "", "hello world", "X|2|O\n4|X|6\n7|8|O", "  leading and trailing  ", "\r\n\t\n\n",
    "ünïcödé 你好 🙂 é", "<|im_start|>user\nhi<|im_end|>\n", CALL % 7 + "tail",
    '{"name": "choose_square", "arguments": {"square": 10}}', "don't I'll 1234567890",
]


def _corpus() -> list[str]:
    return [render_chat(c, [TOOL]) for c in CONVERSATIONS] * 20


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(_corpus(), vocab_size=400)


@pytest.fixture(scope="module")
def saved(tok, tmp_path_factory):
    """(path, model): a tiny fp32 model and the tokenizer saved with save_model_dir."""
    model = build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2, seed=0)
    path = str(tmp_path_factory.mktemp("models") / "tiny")
    save_model_dir(model, tok, path)
    return path, model


def _ids(tok, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False)


def test_any_text_round_trips(tok):
    for text in TEXTS:
        assert tok.decode(_ids(tok, text)) == text
    # Qwen2's NFC normalizer (forced by transformers for qwen2 folders) composes characters
    decomposed = "e\u0301"
    assert tok.decode(_ids(tok, decomposed)) == unicodedata.normalize("NFC", decomposed)


def test_special_and_tool_tokens_are_single_ids(tok):
    assert len(tok) <= 400
    for token in SPECIAL_TOKENS + TOOL_TOKENS:
        assert len(_ids(tok, token)) == 1, token
    assert tok.eos_token == IM_END and tok.pad_token == "<|endoftext|>" and tok.bos_token is None
    # tool tags are not special: decoding with skip_special_tokens (vLLM's default) keeps them
    ids = _ids(tok, "<|im_start|>assistant\n" + CALL % 3 + IM_END)
    assert tok.decode(ids, skip_special_tokens=True) == "assistant\n" + CALL % 3


def test_vocab_size_too_small_is_refused():
    with pytest.raises(ValueError, match="vocab_size"):
        build_tokenizer(["abc"], vocab_size=100)


def test_template_renders_tools_roles_and_generation_prompt(tok):
    messages = [SYSTEM, Message("user", "go"), Message("assistant", CALL % 5),
                Message("tool", "taken")]
    text = render_chat(messages, [TOOL], add_generation_prompt=True)
    assert text.startswith(
        "<|im_start|>system\n" + SYSTEM.content + "\n\n# Tools\n"
        "choose_square(square: integer 1-9): Mark an empty square (1-9) with your symbol.\n"
        'To call a tool, reply <tool_call>{"name": ..., "arguments": {...}}</tool_call>'
        "<|im_end|>\n")
    assert text.endswith(
        "<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n" + CALL % 5 + "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\ntaken\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    plain = render_chat([Message("user", "hi")])
    assert plain == "<|im_start|>user\nhi<|im_end|>\n"
    as_dicts = [m.as_dict() for m in messages]
    assert tok.apply_chat_template(as_dicts, tools=[TOOL.as_dict()], add_generation_prompt=True,
                                   tokenize=False) == text


def _turn_pieces(conversation: list[Message]) -> list[str]:
    """Split a conversation the way an episode builds it: the prompt with a generation prompt,
    then per assistant turn its text + <|im_end|>, then the template's delta for what follows
    (env messages and the next generation prompt, or the closing newline)."""
    assistant_at = [i for i, m in enumerate(conversation) if m.role == "assistant"]
    pieces = [render_chat(conversation[: assistant_at[0]], [TOOL], add_generation_prompt=True)]
    for k, i in enumerate(assistant_at):
        pieces.append(conversation[i].content + IM_END)
        done = render_chat(conversation[: i + 1], [TOOL])
        if k + 1 < len(assistant_at):
            nxt = render_chat(conversation[: assistant_at[k + 1]], [TOOL], True)
        else:
            nxt = render_chat(conversation, [TOOL])
        assert nxt.startswith(done), "a rendered prefix changed when messages were appended"
        pieces.append(nxt[len(done) - 1 :])  # the "\n" after <|im_end|> starts the delta
    return pieces


@pytest.mark.parametrize("index", range(len(CONVERSATIONS)))
def test_turn_boundaries_are_token_exact(tok, index):
    conversation = CONVERSATIONS[index]
    pieces = _turn_pieces(conversation)
    full = render_chat(conversation, [TOOL])
    assert "".join(pieces) == full
    concatenated = [i for piece in pieces for i in _ids(tok, piece)]
    assert concatenated == _ids(tok, full)
    templated = tok.apply_chat_template([m.as_dict() for m in conversation],
                                        tools=[TOOL.as_dict()], tokenize=True)["input_ids"]
    assert templated == concatenated


def test_saved_tokenizer_reloads_identically(tok, saved):
    path, _ = saved
    reloaded = AutoTokenizer.from_pretrained(path)
    for text in TEXTS + _corpus()[:3]:
        assert _ids(reloaded, text) == _ids(tok, text), text
    assert reloaded.chat_template == tok.chat_template
    assert (reloaded.eos_token_id, reloaded.pad_token_id) == (tok.eos_token_id, tok.pad_token_id)
    assert len(reloaded) == len(tok)
    ids = _ids(reloaded, CALL % 3)
    assert reloaded.decode(ids, skip_special_tokens=True) == CALL % 3
    for conversation in CONVERSATIONS:
        as_dicts = [m.as_dict() for m in conversation]
        text = reloaded.apply_chat_template(as_dicts, tools=[TOOL.as_dict()], tokenize=False)
        ids = reloaded.apply_chat_template(as_dicts, tools=[TOOL.as_dict()])["input_ids"]
        assert ids == _ids(reloaded, text) == _ids(tok, text)


def test_model_size_heads_and_token_ids(tok):
    model = build_tiny_model(tok, hidden_size=128, num_layers=4, num_heads=4, seed=0)
    assert 1_000_000 <= model.num_parameters() <= 5_000_000
    cfg = model.config
    assert cfg.hidden_size // cfg.num_attention_heads >= 32
    assert cfg.vocab_size == len(tok) and cfg.tie_word_embeddings
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    for source in (cfg, model.generation_config):
        assert source.eos_token_id == tok.convert_tokens_to_ids(IM_END)
        assert source.pad_token_id == tok.pad_token_id
    with pytest.raises(ValueError, match="head size"):
        build_tiny_model(tok, hidden_size=64, num_layers=1, num_heads=4, seed=0)


def test_model_is_deterministic_for_a_seed(tok):
    rng_state = torch.random.get_rng_state()
    a, b, c = (build_tiny_model(tok, 64, 1, 2, seed=s) for s in (3, 3, 4))
    assert torch.equal(torch.random.get_rng_state(), rng_state)  # global RNG untouched
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    assert any(
        not torch.equal(pa, pc) for pa, pc in zip(a.parameters(), c.parameters(), strict=True)
    )


def test_saved_model_reloads_with_identical_logits(tok, saved):
    path, model = saved
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json"} <= set(os.listdir(path))
    ids = torch.tensor([_ids(tok, render_chat(CONVERSATIONS[0], [TOOL]))])
    with torch.no_grad():
        expected = model(ids).logits
        reloaded = AutoModelForCausalLM.from_pretrained(path).eval()
        assert torch.equal(reloaded(ids).logits, expected)
        loaded, loaded_tok = load_model(path, dtype="float32")
        assert not loaded.training and torch.equal(loaded(ids).logits, expected)
        assert _ids(loaded_tok, "X|2|O") == _ids(tok, "X|2|O")
    bf16, _ = load_model(path)
    assert next(bf16.parameters()).dtype == torch.bfloat16


def test_save_model_dir_replaces_whole_folder(tok, tmp_path):
    path = tmp_path / "m"
    save_model_dir(build_tiny_model(tok, 64, 1, 2, seed=0), tok, path)
    (path / "stale.txt").write_text("from the old folder")
    save_model_dir(build_tiny_model(tok, 64, 2, 2, seed=1), tok, path)
    assert not (path / "stale.txt").exists()
    assert json.loads((path / "config.json").read_text())["num_hidden_layers"] == 2
    assert os.listdir(tmp_path) == ["m"]  # no temp folders left behind


def test_load_model_errors_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing"):
        load_model(str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model(str(tmp_path))
    with pytest.raises(ValueError, match="dtype"):
        load_model(str(tmp_path), dtype="float16")


def _two_rows(tok, length: int) -> torch.Tensor:
    """[2, length] ids of two short board texts (each encodes to more than `length` ids)."""
    rows = [_ids(tok, "X|2|O\n4|X|6 go on"), _ids(tok, "1|2|3\n4|5|6 ok then")]
    assert min(len(r) for r in rows) >= length
    return torch.tensor([r[:length] for r in rows])


def test_token_logprobs_match_hand_computation(tok, saved):
    _, model = saved
    ids = _two_rows(tok, 10)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # right padding
    temperature = 0.7
    got = token_logprobs(model, ids, mask, temperature=temperature)
    assert got.shape == ids.shape and got.dtype == torch.float32
    with torch.no_grad():
        logits = model(ids, attention_mask=mask).logits.double() / temperature
    for b, t in [(0, 1), (0, 9), (1, 3), (1, 6)]:
        row = logits[b, t - 1]
        expected = row[ids[b, t]] - torch.logsumexp(row, dim=-1)
        assert got[b, t].item() == pytest.approx(expected.item(), abs=1e-4)
    assert torch.all(got[:, 0] == 0) and torch.all(got[1, 7:] == 0)
    assert torch.all(got[:, 1:][mask[:, 1:].bool()] < 0)


def test_token_logprobs_ignore_left_padding_and_backprop(tok, saved):
    _, model = saved
    ids = torch.tensor([_ids(tok, "You are X. Your move.")])
    pad = torch.full((1, 4), tok.pad_token_id)
    padded = torch.cat([pad, ids], dim=1)
    mask = torch.cat([torch.zeros_like(pad), torch.ones_like(ids)], dim=1)
    plain = token_logprobs(model, ids, torch.ones_like(ids))
    left = token_logprobs(model, padded, mask)
    assert torch.allclose(left[:, 4:], plain, atol=1e-5) and torch.all(left[:, :5] == 0)
    left.sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    model.zero_grad(set_to_none=True)


def test_token_logprobs_chunked_checkpointed_equals_plain(tok, saved, monkeypatch):
    """Grad on or off, chunked or not: the same values (bit for bit: the learner's old and new
    logprobs must agree) and the same gradients."""
    _, model = saved
    ids = _two_rows(tok, 9)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        reference = token_logprobs(model, ids, mask)
    grads = []
    for chunk in (4096, 5):  # 5 rows: chunks straddle the two sequences
        monkeypatch.setattr(model_module, "_LOGPROB_CHUNK_TOKENS", chunk)
        out = token_logprobs(model, ids, mask)
        assert torch.equal(out.detach(), reference)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
        model.zero_grad(set_to_none=True)
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_set_torch_threads_can_be_called_twice():
    before = torch.get_num_threads()
    set_torch_threads(1)
    set_torch_threads(1)
    assert torch.get_num_threads() == 1
    torch.set_num_threads(before)


def test_template_signature_handles_several_tools_and_bare_schemas():
    tools = [TOOL, ToolSchema("pass_turn", "", {"type": "object", "properties": {}}),
             ToolSchema("say", "Speak.", {"type": "object",
                                          "properties": {"text": {"type": "string"},
                                                         "loud": {"type": "boolean"}}})]
    text = render_chat([Message("user", "go")], tools, add_generation_prompt=True)
    assert "\nchoose_square(square: integer 1-9): Mark" in text
    assert "\npass_turn()\n" in text
    assert "\nsay(text: string, loud: boolean): Speak.\n" in text
    assert text.endswith("<|im_start|>user\ngo<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize("padding", ["right", "left"])
def test_logprobs_from_a_position_match_the_full_computation(tok, padding):
    """from_position p: the output head runs on the last positions only, and columns p.. equal
    the full computation's (log-probs and entropies), columns before p are 0."""
    model = build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2)
    ids = torch.randint(7, len(tok), (3, 20), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    if padding == "right":
        mask[1, 15:] = 0
    else:
        mask[2, :4] = 0
    with torch.no_grad():
        full, full_h = token_logprobs(model, ids, mask, with_entropy=True)
        for p in (1, 9, 19):
            part, part_h = token_logprobs(model, ids, mask, with_entropy=True, from_position=p)
            torch.testing.assert_close(part[:, p:], full[:, p:], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(part_h[:, p:], full_h[:, p:], rtol=1e-5, atol=1e-5)
            assert not part[:, :p].any() and not part_h[:, :p].any()


def test_a_shared_prefix_gives_the_plain_logprobs_and_gradients(tok):
    """share_prefix: rows that open with the same ids run them once; log-probs, entropies
    and gradients equal the plain pass's (to rounding). Left padding (a prefix with pads) and
    rows that share nothing take the plain pass."""
    model = build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2)
    gen = torch.Generator().manual_seed(1)
    prompts = torch.randint(7, len(tok), (2, 12), generator=gen)
    rows = [torch.cat([prompts[i % 2], torch.randint(7, len(tok), (6 - i % 3,),
                                                     generator=gen)]) for i in range(6)]
    ids = torch.zeros(6, 18, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, : len(row)], mask[i, : len(row)] = row, 1

    def run(share, ids=ids, mask=mask):
        model.zero_grad()
        lp, h = token_logprobs(model, ids, mask, with_entropy=True, from_position=12,
                               share_prefix=share)
        (lp.sum() + h.sum()).backward()
        return lp.detach(), h.detach(), [p.grad.clone() for p in model.parameters()]

    plain, shared = run(False), run(True)
    torch.testing.assert_close(shared[0], plain[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(shared[1], plain[1], rtol=1e-5, atol=1e-5)
    for a, b in zip(shared[2], plain[2], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    calls = []
    hook = model.register_forward_pre_hook(lambda m, a, k: calls.append(k["input_ids"].shape),
                                           with_kwargs=True)
    run(True)
    assert calls == [(2, 11), (6, 7)]  # 2 distinct prefixes, then each row's own columns
    calls.clear()
    left = torch.roll(mask, 1, dims=1)  # a pad at the start of every row
    run(True, torch.roll(ids, 1, dims=1), left)
    assert calls == [(6, 18)]
    hook.remove()
