"""Supervised warm start: example encoding, the loss mask, the schedule, determinism, and that a
short fine-tune really teaches a random tiny model the tool-call format."""

from __future__ import annotations

import random
import re

import pytest
import torch

from arl.learner.optim import lr_factor
from arl.model.tiny import IM_END, build_tiny_model, build_tokenizer, render_chat
from arl.types import Message
from arl.warmstart.sft import IGNORE, collate, encode_example, supervised_finetune
from tests.builders import TOOL

SYSTEM = "You play tic-tac-toe as X. Reply with one choose_square tool call."
CALL = '<tool_call>{"name": "choose_square", "arguments": {"square": %s}}</tool_call>'
CALL_RE = re.compile(re.escape(CALL).replace("%s", r"[1-9]") + re.escape(IM_END))


def _example(rng: random.Random):
    """(messages, tools, target, board digits): a random position and a call on an empty
    square (the board shows empty squares as their digits)."""
    cells = [str(i) for i in range(1, 10)]
    for i in rng.sample(range(9), rng.randint(0, 7)):
        cells[i] = rng.choice("XO")
    board = "\n".join("|".join(cells[r : r + 3]) for r in (0, 3, 6))
    empty = [c for c in cells if c.isdigit()]
    messages = (Message("system", SYSTEM), Message("user", board + "\nYou are X. Your move."))
    return messages, (TOOL,), CALL % rng.choice(empty), set(empty)


def _data(n: int, seed: int):
    rng = random.Random(seed)
    return [_example(rng) for _ in range(n)]


def _tokenizer(examples):
    corpus = [render_chat([*m, Message("assistant", t)], tools) for m, tools, t, _ in examples]
    return build_tokenizer(corpus, vocab_size=400)


def _greedy_call_rate(model, tok, examples) -> float:
    """Share of prompts whose greedy reply is exactly one well-formed call on a square 1-9,
    closed by <|im_end|>. (Legality is not asked: the warm start teaches the format.)"""
    tok.padding_side = "left"
    prompts = [render_chat(m, tools, add_generation_prompt=True) for m, tools, _, _ in examples]
    batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    tok.padding_side = "right"
    with torch.no_grad():
        out = model.generate(**batch, max_new_tokens=24, do_sample=False)
    replies = tok.batch_decode(out[:, batch["input_ids"].shape[1] :])
    return sum(bool(CALL_RE.match(reply)) for reply in replies) / len(examples)


def test_encode_example_appends_target_and_end_of_turn():
    examples = _data(4, seed=1)
    tok = _tokenizer(examples)
    messages, tools, target, _ = examples[0]
    ids, prompt_len = encode_example(tok, messages, tools, target)
    prompt = render_chat(messages, tools, add_generation_prompt=True)
    assert ids[:prompt_len] == tok.encode(prompt)
    assert tok.decode(ids[prompt_len:]) == target + IM_END
    assert ids[-1] == tok.convert_tokens_to_ids(IM_END)


def test_collate_puts_loss_only_on_targets():
    batch = [([5, 6, 7, 8], 2), ([5, 6, 9], 1)]
    input_ids, attention_mask, labels = collate(batch, pad_id=0)
    assert input_ids.tolist() == [[5, 6, 7, 8], [5, 6, 9, 0]]
    assert attention_mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert labels.tolist() == [[IGNORE, IGNORE, 7, 8], [IGNORE, 6, 9, IGNORE]]


def test_lr_warms_up_then_decays_to_zero():
    factors = [lr_factor(step, 4, 20, "cosine") for step in range(20)]  # as the warm start uses it
    assert factors[:4] == [0.25, 0.5, 0.75, 1.0]
    assert all(a >= b for a, b in zip(factors[3:], factors[4:], strict=False))
    assert factors[-1] < 0.01


def test_same_seed_same_losses_and_weights():
    examples = _data(12, seed=2)
    tok = _tokenizer(examples)
    runs = []
    for _ in range(2):
        model = build_tiny_model(tok, hidden_size=64, num_layers=1, num_heads=2, seed=0)
        losses = supervised_finetune(model, tok, [e[:3] for e in examples], epochs=2, lr=1e-3,
                                     batch_size=4, seed=7)
        runs.append((losses, model))
    (losses_a, model_a), (losses_b, model_b) = runs
    assert losses_a == losses_b and len(losses_a) == 2
    for pa, pb in zip(model_a.parameters(), model_b.parameters(), strict=True):
        assert torch.equal(pa, pb)
    assert not model_a.training
    assert model_a.config._attn_implementation == "sdpa"  # restored after the CPU-only switch


def test_short_finetune_teaches_the_tool_call_format():
    train, held_out = _data(384, seed=3), _data(48, seed=4)
    tok = _tokenizer(train)
    model = build_tiny_model(tok, hidden_size=64, num_layers=2, num_heads=2, seed=0)
    model = model.to(torch.bfloat16)
    before = _greedy_call_rate(model, tok, held_out)
    losses = supervised_finetune(model, tok, [e[:3] for e in train], epochs=2, lr=1e-2,
                                 batch_size=16, seed=0)
    after = _greedy_call_rate(model, tok, held_out)
    assert losses[-1] < losses[0]
    assert before <= 0.05
    assert after >= 0.8, f"greedy call rate {before:.2f} -> {after:.2f}, losses {losses}"


@pytest.mark.parametrize("bad", [[]])
def test_no_examples_is_refused(bad):
    tok = _tokenizer(_data(2, seed=5))
    model = build_tiny_model(tok, hidden_size=64, num_layers=1, num_heads=2, seed=0)
    with pytest.raises(ValueError, match="at least one example"):
        supervised_finetune(model, tok, bad, epochs=1, lr=1e-3, batch_size=2, seed=0)


def _prompt_nll(model, tok, examples) -> float:
    """Mean next-token NLL over the prompt ids (after the first) of `examples`."""
    total, count = 0.0, 0
    with torch.no_grad():
        for m, tools, target, _ in examples:
            ids, prompt_len = encode_example(tok, m, tools, target)
            x = torch.tensor([ids[:prompt_len]])
            logp = model(input_ids=x).logits.float().log_softmax(-1)[0, :-1]
            total -= logp.gather(1, x[0, 1:, None]).sum().item()
            count += prompt_len - 1
    return total / count


def test_prompt_loss_trains_on_the_prompt_and_autocast_keeps_fp32_weights():
    train, held_out = _data(64, seed=6), _data(8, seed=7)
    tok = _tokenizer(train)
    nll = {}
    for prompt_loss in (False, True):
        model = build_tiny_model(tok, hidden_size=64, num_layers=1, num_heads=2, seed=0)
        losses = supervised_finetune(model, tok, [e[:3] for e in train], epochs=2, lr=1e-2,
                                     batch_size=16, seed=0, prompt_loss=prompt_loss,
                                     bf16_autocast=True)
        assert all(p.dtype == torch.float32 for p in model.parameters())
        assert losses[-1] < losses[0]
        nll[prompt_loss] = _prompt_nll(model, tok, held_out)
    # Without prompt loss the prompt stays near chance (ln 400 = 6.0; measured 5.4); with it
    # the model starts to learn it (measured 3.5).
    assert nll[True] < nll[False] - 1.0, nll
