"""Hand-computed numbers and invariants for arl/gspo.py (GSPO, arXiv 2507.18071)."""

import math

import pytest
import torch

from arl.gspo import (
    LOSSES,
    LossOutput,
    diagnostics,
    group_advantages,
    grpo_loss,
    gspo_loss,
    gspo_token_loss,
    negative_odds_weighted,
    sequence_log_ratio,
)

# ---------------------------------------------------------------- group_advantages


def test_group_advantages_hand_computed():
    # group 0: mean 0, population var (1+0+0+1)/4 = 0.5, std = sqrt(0.5) -> A = r / 0.70710...
    # group 1: mean 2, population std 1 -> A = [1, -1, 1, -1] / (1 + eps)
    adv = group_advantages(torch.tensor([[1.0, 0.0, 0.0, -1.0], [3.0, 1.0, 3.0, 1.0]]))
    s = math.sqrt(0.5) + 1e-6
    expected = torch.tensor([[1 / s, 0.0, 0.0, -1 / s], [1 / 1.000001, -1 / 1.000001] * 2])
    torch.testing.assert_close(adv, expected, rtol=1e-6, atol=1e-7)


def test_group_advantages_equal_groups_are_exact_zeros():
    # 0.1 is not exact in binary: mean - r can round to a tiny nonzero; must still be exact 0.
    rewards = torch.tensor([[0.1, 0.1, 0.1], [7.0, 7.0, 7.0], [1.0, 0.0, 1.0]])
    adv = group_advantages(rewards, eps=0.0)
    assert torch.equal(adv[:2], torch.zeros(2, 3))
    assert torch.isfinite(adv).all()
    assert adv[2].abs().sum() > 0
    single = group_advantages(torch.tensor([[5.0], [-1.0]]))  # G=1: std 0, no NaN
    assert torch.equal(single, torch.zeros(2, 1))


def test_std_scaling_cancels_a_better_action_that_scale_none_keeps():
    """Kuhn poker, the jack facing a check, in groups that share the bot's seed: betting wins 1
    where the bot's draw folds and loses 2 where it calls, checking loses 1 either way. Betting
    is better by 0.5 in expectation; divided by each group's std, the two groups cancel."""
    fold_world = [1.0, 1.0, -1.0, -1.0]  # two bets, two checks
    call_world = [-2.0, -2.0, -1.0, -1.0]
    rewards = torch.tensor([fold_world, call_world])  # [2, 4]
    std = group_advantages(rewards, 1e-6, "std")
    none = group_advantages(rewards, 1e-6, "none")
    assert std[:, :2].sum().item() == pytest.approx(0.0, abs=1e-5)
    assert none.tolist() == [[1.0, 1.0, -1.0, -1.0], [-0.5, -0.5, 0.5, 0.5]]
    assert none[:, :2].sum().item() == 1.0  # the bets' total advantage: positive
    assert group_advantages(torch.tensor([[2.0, 2.0]]), scale="none").tolist() == [[0.0, 0.0]]
    with pytest.raises(ValueError, match="scale"):
        group_advantages(rewards, scale="max")


def test_group_advantages_integer_rewards():
    adv = group_advantages(torch.tensor([[1, -1]]))
    torch.testing.assert_close(adv, torch.tensor([[1.0, -1.0]]) / 1.000001)


# ---------------------------------------------------------------- sequence_log_ratio


def test_sequence_log_ratio_hand_computed_with_mask():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0, -4.0], [-0.5, -0.5, -0.5, -0.5]])
    old = torch.tensor([[-1.5, -1.0, -9.0, -9.0], [-0.5, -0.7, -0.2, -0.5]])
    mask = torch.tensor([[1, 1, 0, 0], [0, 1, 1, 1]])
    # row 0: (0.5 + -1.0) / 2 = -0.25 (masked tokens with diff 6 and 5 ignored)
    # row 1: (0.2 + -0.3 + 0.0) / 3 = -0.1/3
    out = sequence_log_ratio(logprobs, old, mask)
    torch.testing.assert_close(out, torch.tensor([-0.25, -0.1 / 3]))


def test_sequence_log_ratio_empty_mask_row_is_zero():
    logprobs = torch.tensor([[-1.0, -2.0], [-1.0, -2.0]], requires_grad=True)
    old = torch.tensor([[-3.0, -3.0], [-3.0, -3.0]])
    out = sequence_log_ratio(logprobs, old, torch.tensor([[0, 0], [1, 0]]))
    assert out.tolist() == [0.0, 2.0]
    out.sum().backward()
    assert logprobs.grad.tolist() == [[0.0, 0.0], [1.0, 0.0]]


def test_sequence_log_ratio_bf16_computed_in_fp32():
    g = torch.Generator().manual_seed(0)
    logprobs = (-5 * torch.rand(4, 300, generator=g)).bfloat16()
    # a mean log-ratio near 0.4: a bf16 sum of ~240 terms near 100 has a resolution of 0.5
    old = (logprobs.float() - 0.4 + 0.1 * torch.randn(4, 300, generator=g)).bfloat16()
    mask = (torch.rand(4, 300, generator=g) < 0.8).long()
    out = sequence_log_ratio(logprobs, old, mask)
    assert out.dtype == torch.float32
    m = mask.double()
    ref = ((logprobs.double() - old.double()) * m).sum(-1) / m.sum(-1)
    torch.testing.assert_close(out.double(), ref, rtol=0, atol=1e-6)
    # the check is discriminating: a bf16 computation is off by far more than atol
    naive = ((logprobs - old) * mask.bfloat16()).sum(-1) / mask.sum(-1).bfloat16()
    assert (naive.double() - ref).abs().max() > 1e-4


# ---------------------------------------------------------------- gspo_loss by hand


def _hand_batch():
    # clip_low = 0.2, clip_high = 0.3 -> clip range [0.8, 1.3]; T = 3
    #   seq 0: log s = ln 1.5 over 2 tokens, A = +1  -> min(1.5, 1.3)      =  1.3  clipped high
    #   seq 1: log s = ln 0.5 over 3 tokens, A = -2  -> min(-1.0, -1.6)    = -1.6  clipped low
    #   seq 2: log s = ln 1.5 over 1 token,  A = -2  -> min(-3.0, -2.6)    = -3.0  not clipped
    #   seq 3: log s = 0 (+0.3 and -0.3),    A = 0.5 -> min(0.5, 0.5)      =  0.5  not clipped
    #   seq 4: log s = ln 0.5 over 2 tokens, A = +1  -> min(0.5, 0.8)      =  0.5  not clipped
    # sum = 1.3 - 1.6 - 3.0 + 0.5 + 0.5 = -2.3; N = 5 -> L = -(-2.3) / 5 = 0.46
    l15, l05 = math.log(1.5), math.log(0.5)
    delta = torch.tensor(
        [
            [l15 + 0.1, l15 - 0.1, 9.0],  # last token masked out: its 9.0 must not count
            [l05 - 0.2, l05, l05 + 0.2],
            [-7.0, l15, 4.0],
            [0.3, -0.3, 0.0],
            [l05, 5.0, l05],
        ]
    )
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 1, 0], [1, 1, 1], [1, 0, 1]])
    logprobs = -torch.arange(1.0, 16.0).reshape(5, 3) / 10
    old = logprobs - delta
    adv = torch.tensor([1.0, -2.0, -2.0, 0.5, 1.0])
    return logprobs, old, adv, mask


@pytest.mark.parametrize("loss_fn", [gspo_loss, gspo_token_loss])
def test_gspo_loss_hand_computed(loss_fn):
    logprobs, old, adv, mask = _hand_batch()
    logprobs.requires_grad_(True)
    out = loss_fn(logprobs, old, adv, mask, 0.2, 0.3, num_sequences=5)
    assert isinstance(out, LossOutput)
    torch.testing.assert_close(out.loss, torch.tensor(0.46), rtol=0, atol=1e-6)
    torch.testing.assert_close(out.ratio, torch.tensor([1.5, 0.5, 1.5, 1.0, 0.5]))
    assert out.clipped_low.tolist() == [0.0, 1.0, 0.0, 0.0, 0.0]
    assert out.clipped_high.tolist() == [1.0, 0.0, 0.0, 0.0, 0.0]
    assert not out.ratio.requires_grad
    out.loss.backward()
    g = logprobs.grad
    assert torch.all(g[:2] == 0)  # clipped sequences get no gradient
    # unclipped: dL/dlp_t = -(1/N) A s / |y| on mask tokens
    #   seq 2: -(1/5)(-2)(1.5)/1 = 0.6;  seq 3: -(1/5)(0.5)(1)/3 = -1/30;  seq 4: -(1/5)(1)(0.5)/2
    torch.testing.assert_close(g[2], torch.tensor([0.0, 0.6, 0.0]))
    torch.testing.assert_close(g[3], torch.full((3,), -1 / 30))
    torch.testing.assert_close(g[4], torch.tensor([-0.05, 0.0, -0.05]))
    # the normaliser is the given global N, not the local batch size
    out10 = loss_fn(logprobs, old, adv, mask, 0.2, 0.3, num_sequences=10)
    torch.testing.assert_close(out10.loss, torch.tensor(0.23), rtol=0, atol=1e-6)


def test_grpo_loss_hand_computed():
    # clip range [0.8, 1.2]
    # seq 0: token ratios [1.5, 0.9], A = +1 -> [min(1.5, 1.2), min(0.9, 0.9)] = [1.2, 0.9],
    #        mean 1.05; high-clipped tokens 1/2, low 0; mean ratio 1.2
    # seq 1: token ratios [0.5, (masked 3.0)], A = -1 -> min(-0.5, -0.8) = -0.8; low 1/1
    # sum = 1.05 - 0.8 = 0.25; N = 2 -> L = -0.125
    old = torch.tensor([[-1.0, -2.0], [-1.0, -1.0]])
    logprobs = old + torch.log(torch.tensor([[1.5, 0.9], [0.5, 3.0]]))
    logprobs.requires_grad_(True)
    mask = torch.tensor([[1, 1], [1, 0]])
    out = grpo_loss(logprobs, old, torch.tensor([1.0, -1.0]), mask, 0.2, 0.2, num_sequences=2)
    torch.testing.assert_close(out.loss, torch.tensor(-0.125), rtol=0, atol=1e-6)
    torch.testing.assert_close(out.ratio, torch.tensor([1.2, 0.5]))
    torch.testing.assert_close(out.clipped_low, torch.tensor([0.0, 1.0]))
    torch.testing.assert_close(out.clipped_high, torch.tensor([0.5, 0.0]))
    out.loss.backward()
    # only seq 0 token 1 is unclipped: dL/dlp = -(1/2) * A * r / |y| = -(1/2)(0.9)/2 = -0.225
    torch.testing.assert_close(logprobs.grad, torch.tensor([[0.0, -0.225], [0.0, 0.0]]))


# ---------------------------------------------------------------- invariants


def _random_batch(b=8, t=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    logprobs = -3 * torch.rand(b, t, generator=g, dtype=torch.float64)
    old = logprobs + 0.3 * torch.randn(b, t, generator=g, dtype=torch.float64)
    lengths = torch.tensor([12, 1, 5, 9, 0, 7, 3, 10])[:b]  # includes an empty-mask row
    start = torch.randint(0, 3, (b,), generator=g)
    pos = torch.arange(t)
    mask = ((pos >= start[:, None]) & (pos < start[:, None] + lengths[:, None])).long()
    adv = torch.randn(b, generator=g, dtype=torch.float64)
    return logprobs, old, adv, mask


CLIPS = (0.05, 0.08)


@pytest.mark.parametrize("name", ["gspo", "gspo_token", "grpo"])
@pytest.mark.parametrize("sizes", [(3, 5), (1,) * 8])
def test_micro_batch_invariance(name, sizes):
    loss_fn = LOSSES[name]
    logprobs, old, adv, mask = _random_batch()
    full_leaf = logprobs.clone().requires_grad_(True)
    full = loss_fn(full_leaf, old, adv, mask, *CLIPS, num_sequences=8)
    full.loss.backward()
    # the batch exercises both clipped and unclipped sequences
    flags = full.clipped_low + full.clipped_high
    assert 0 < flags.sum() < 8 and (flags == 0).sum() >= 2

    leaf = logprobs.clone().requires_grad_(True)
    total, outs, i = 0.0, [], 0
    for n in sizes:  # gradient accumulation, one backward per micro-batch
        sl = slice(i, i + n)
        out = loss_fn(leaf[sl], old[sl], adv[sl], mask[sl], *CLIPS, num_sequences=8)
        out.loss.backward()
        total += out.loss.item()
        outs.append(out)
        i += n
    assert abs(total - full.loss.item()) < 1e-6
    torch.testing.assert_close(leaf.grad, full_leaf.grad, rtol=0, atol=1e-6)
    assert diagnostics(outs) == pytest.approx(diagnostics([full]), abs=1e-6)


def test_gspo_token_matches_gspo_value_and_gradient():
    g = torch.Generator().manual_seed(1)
    b, t, v = 8, 12, 11
    logits = torch.randn(b, t, v, generator=g, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(0, v, (b, t), generator=g)
    _, old, adv, mask = _random_batch(seed=1)

    def logprobs_of(x):
        return torch.log_softmax(x, dim=-1).gather(-1, tokens[..., None]).squeeze(-1)  # [B, T]

    with torch.no_grad():  # old policy: perturbed logits, so some sequences clip
        old = logprobs_of(logits + 0.3 * torch.randn(b, t, v, generator=g, dtype=torch.float64))
    a = gspo_loss(logprobs_of(logits), old, adv, mask, *CLIPS, num_sequences=b)
    c = gspo_token_loss(logprobs_of(logits), old, adv, mask, *CLIPS, num_sequences=b)
    flags = a.clipped_low + a.clipped_high
    assert 0 < flags.sum() < b
    (grad_a,) = torch.autograd.grad(a.loss, logits)
    (grad_c,) = torch.autograd.grad(c.loss, logits)
    assert grad_a.abs().sum() > 0
    torch.testing.assert_close(c.loss, a.loss, rtol=0, atol=1e-7)
    torch.testing.assert_close(grad_c, grad_a, rtol=1e-6, atol=1e-9)
    for field in ("ratio", "clipped_low", "clipped_high"):
        assert torch.equal(getattr(a, field), getattr(c, field))


@pytest.mark.parametrize("name", ["gspo", "gspo_token", "grpo"])
def test_gradient_at_ratio_one(name):
    # at s_i = 1 nothing clips: dL/dlp_i,t = -A_i / (N |y_i|) on mask tokens, 0 elsewhere
    logprobs, _, adv, mask = _random_batch()
    leaf = logprobs.clone().requires_grad_(True)
    n = 16  # global N larger than the local batch
    out = LOSSES[name](leaf, logprobs, adv, mask, *CLIPS, num_sequences=n)
    out.loss.backward()
    lengths = mask.sum(-1, keepdim=True).clamp(min=1)
    expected = -adv[:, None] / (n * lengths) * mask
    torch.testing.assert_close(leaf.grad, expected, rtol=1e-6, atol=1e-12)
    assert torch.all(out.ratio == 1.0)
    assert out.clipped_low.sum() == 0 and out.clipped_high.sum() == 0
    # loss value: -(1/N) sum_i A_i over rows that have tokens
    expected_loss = -(adv * (mask.sum(-1) > 0)).sum() / n
    torch.testing.assert_close(out.loss, expected_loss.to(out.loss.dtype))


def test_old_logprobs_and_advantages_get_no_gradient():
    logprobs, old, adv, mask = _random_batch()
    for loss_fn in LOSSES.values():
        lp = logprobs.clone().requires_grad_(True)
        o = old.clone().requires_grad_(True)
        a = adv.clone().requires_grad_(True)
        out = loss_fn(lp, o, a, mask, *CLIPS, num_sequences=8)
        out.loss.backward()
        assert o.grad is None and a.grad is None and lp.grad is not None


def test_bf16_logprobs_loss_is_fp32_and_close_to_fp32_reference():
    logprobs, old, adv, mask = _random_batch()
    lp16, old16 = logprobs.bfloat16(), old.bfloat16()
    for loss_fn in LOSSES.values():
        out = loss_fn(lp16, old16, adv.float(), mask, *CLIPS, num_sequences=8)
        ref = loss_fn(lp16.double(), old16.double(), adv, mask, *CLIPS, num_sequences=8)
        assert out.loss.dtype == torch.float32
        assert abs(out.loss.item() - ref.loss.item()) < 1e-6


def test_num_sequences_must_be_positive():
    logprobs, old, adv, mask = _hand_batch()
    with pytest.raises(ValueError):
        gspo_loss(logprobs, old, adv, mask, 0.2, 0.3, num_sequences=0)


# ---------------------------------------------------------------- diagnostics


def test_diagnostics_aggregates_over_micro_batches():
    a = LossOutput(
        torch.tensor(0.0),
        torch.tensor([1.0, 0.5, 1.5]),
        torch.tensor([0.0, 1.0, 0.0]),
        torch.tensor([0.0, 0.0, 1.0]),
    )
    b = LossOutput(torch.tensor(0.0), torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([1.0]))
    d = diagnostics([a, b], [torch.tensor([3, 20, 200]), torch.tensor([8])])
    hist = d.pop("gspo/ratio_hist")
    assert sum(hist.counts) == 4 and hist.edges[0] == 0.5 and hist.edges[-1] == 2.0
    # Clip fraction (low + high) by response length: (0, 8] holds 3 and 8, (16, 32] holds
    # 20, (128, inf) holds 200; the other bins are empty and left out.
    assert {k: d.pop(k) for k in list(d) if "_len_" in k} == {
        "gspo/clip_fraction_len_le8": 0.5, "gspo/clip_fraction_len_le32": 1.0,
        "gspo/clip_fraction_len_gt128": 1.0}
    assert d == pytest.approx(
        {
            "gspo/ratio_mean": 5.0 / 4,
            "gspo/ratio_min": 0.5,
            "gspo/ratio_max": 2.0,
            "gspo/clip_fraction_low": 1 / 4,
            "gspo/clip_fraction_high": 2 / 4,
        }
    )
    with pytest.raises(ValueError):
        diagnostics([])


def test_losses_mapping_matches_config_choices():
    assert LOSSES == {"gspo": gspo_loss, "gspo_token": gspo_token_loss, "grpo": grpo_loss}


def test_behaviour_weights_are_truncated_length_normalised_ratios():
    from arl.gspo import behaviour_weights

    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    sampler = torch.zeros(3, 3)
    old = torch.tensor([[math.log(2.0), math.log(2.0), 9.0],  # pad column ignored
                        [math.log(8.0), 0.0, 0.0],
                        [5.0, 5.0, 5.0]])  # no mask tokens
    w = behaviour_weights(old, sampler, mask, cap=4.0)
    assert w.tolist() == pytest.approx([2.0, 4.0, 1.0])  # 8 capped at 4
    assert behaviour_weights(sampler, sampler, mask, cap=4.0).tolist() == [1.0, 1.0, 1.0]


def test_entropy_bonus_by_hand_and_split_invariant():
    from arl.gspo import entropy_bonus

    entropy = torch.tensor([[0.5, 1.0, 2.0, 9.0], [1.5, 0.0, 0.0, 0.0], [3.0, 3.0, 0.0, 0.0]],
                           requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]])
    bonus = entropy_bonus(entropy, mask, num_sequences=4)  # N counts the empty row too
    # per sequence: (0.5 + 1.0) / 2 = 0.75; 1.5; the empty row 0 -> sum 2.25 over N = 4
    assert bonus.item() == pytest.approx(2.25 / 4)
    bonus.backward()
    assert entropy.grad[0].tolist() == [0.125, 0.125, 0.0, 0.0]  # 1/|y| / N where mask=1
    assert entropy.grad[2].tolist() == [0.0] * 4
    parts = sum(entropy_bonus(entropy[i:i + 1].detach(), mask[i:i + 1], 4) for i in range(3))
    assert parts.item() == pytest.approx(bonus.item())


def test_entropy_bonus_over_each_rows_decision_tokens():
    from arl.gspo import decision_tokens, entropy_bonus

    # Row 0: a tool call whose one uncertain token (1.4 nats) sits among near-certain ones;
    # row 1 has two mask tokens only; the masked-out 9.0 is never chosen.
    entropy = torch.tensor([[0.01, 1.4, 0.02, 0.6, 9.0], [0.3, 0.1, 9.0, 9.0, 9.0]],
                           requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]])
    assert decision_tokens(entropy, mask, 1).tolist() == [
        [False, True, False, False, False], [True, False, False, False, False]]
    assert decision_tokens(entropy, mask, 3).tolist() == [
        [False, True, True, True, False], [True, True, False, False, False]]
    bonus = entropy_bonus(entropy, mask, num_sequences=2, top_k=2)
    # per row: (1.4 + 0.6) / 2 = 1.0 and (0.3 + 0.1) / 2 = 0.2 -> (1.0 + 0.2) / N
    assert bonus.item() == pytest.approx(1.2 / 2)
    bonus.backward()
    assert entropy.grad[0].tolist() == pytest.approx([0.0, 0.25, 0.0, 0.25, 0.0])
    # every mask token (k at least the longest row) is the plain bonus
    assert entropy_bonus(entropy, mask, 2, top_k=5).item() == pytest.approx(
        entropy_bonus(entropy, mask, 2).item())


def test_gspo_token_with_per_token_advantages():
    logprobs, old, adv, mask = _random_batch(b=4, t=10, seed=3)
    n = 4
    flat = gspo_token_loss(logprobs, old, adv, mask, *CLIPS, num_sequences=n)
    per_token = gspo_token_loss(logprobs, old, adv[:, None].expand(-1, 10).clone(), mask, *CLIPS,
                                num_sequences=n)
    torch.testing.assert_close(flat.loss, per_token.loss)  # the same advantage everywhere
    assert torch.equal(flat.clipped_low, per_token.clipped_low)
    # Per token: L = -(1/N) sum_i (1/|y_i|) sum_t s_i A_i,t when nothing is clipped (ratio 1).
    token_adv = torch.randn(4, 10, generator=torch.Generator().manual_seed(9))
    out = gspo_token_loss(old.clone(), old, token_adv, mask, *CLIPS, num_sequences=n)
    expected = -((token_adv * mask).sum(-1) / mask.sum(-1)).sum() / n
    torch.testing.assert_close(out.loss, expected.to(out.loss.dtype))
    with pytest.raises(ValueError, match="per-token"):
        gspo_loss(logprobs, old, token_adv, mask, *CLIPS, num_sequences=n)


def test_entropy_bonus_weighs_each_row_as_the_loss_does():
    from arl.gspo import entropy_bonus

    entropy = torch.tensor([[0.5, 1.0], [1.5, 0.0], [2.0, 4.0]])
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]])
    weights = torch.tensor([0.5, 0.5, 1.0])  # one episode in two rows, one in one
    bonus = entropy_bonus(entropy, mask, num_sequences=2.0, weights=weights)
    assert bonus.item() == pytest.approx((0.5 * 0.75 + 0.5 * 1.5 + 3.0) / 2)


def test_negative_odds_weighting_by_hand():
    # Three one-token replies of probability 0.9, 0.5 and 0.2, and a two-token reply whose
    # masked tokens multiply to 0.99 * 0.5 (its third token is masked out).
    old = torch.log(torch.tensor([[0.9, 1.0, 1.0], [0.5, 1.0, 1.0], [0.2, 1.0, 1.0],
                                  [0.99, 0.5, 0.01]]))
    mask = torch.tensor([[1, 0, 0], [1, 0, 0], [1, 0, 0], [1, 1, 0]])
    adv = torch.tensor([-1.0, -2.0, -0.5, 1.5])
    out = negative_odds_weighted(adv, old, mask, cap=5.0)
    # odds 9 (capped at 5), 1, 0.25 (floored at 1); a positive advantage is left alone
    torch.testing.assert_close(out, torch.tensor([-5.0, -2.0, -0.5, 1.5]))
    out = negative_odds_weighted(adv[:3], old[:3], mask[:3], cap=100.0)
    torch.testing.assert_close(out, torch.tensor([-9.0, -2.0, -0.5]))
    per_token = adv[:, None].expand(4, 3).clone()  # [B, T] advantages get one weight a row
    out = negative_odds_weighted(per_token, old, mask, cap=5.0)
    torch.testing.assert_close(out, torch.tensor([-5.0, -2.0, -0.5, 1.5])[:, None].expand(4, 3))
    with pytest.raises(ValueError, match="cap must be >= 1"):
        negative_odds_weighted(adv, old, mask, cap=0.5)


def test_negative_odds_weighting_keeps_a_settled_replys_gradient():
    """The gradient that pushes a reply of probability p down is (1 - p) on its logit under
    the plain policy gradient, and p with the odds weight: for a settled reply, about 1."""

    def logit_grad(p_reply: float, cap: float) -> float:
        logits = torch.tensor([math.log(p_reply), math.log(1 - p_reply)], requires_grad=True)
        logp = torch.log_softmax(logits, dim=0)[:1][None]  # [1, 1] the sampled reply
        adv = torch.tensor([-1.0])
        if cap:
            adv = negative_odds_weighted(adv, logp.detach(), torch.ones(1, 1), cap)
        (-(adv * logp.sum())).backward()
        return float(logits.grad[0])  # d loss / d logit of the sampled reply

    assert logit_grad(0.999, 0) == pytest.approx(0.001, rel=1e-3)  # vanishes
    assert logit_grad(0.999, 1000.0) == pytest.approx(0.999, rel=1e-3)  # unlikelihood's p
    assert logit_grad(0.999, 10.0) == pytest.approx(10 * 0.001, rel=1e-2)  # capped: 10 x
    assert logit_grad(0.3, 1000.0) == pytest.approx(0.7, rel=1e-3)  # odds < 1: plain gradient


# ---------------------------------------------------------------- the reference KL penalty


def test_token_kl_estimators_by_hand():
    from arl.gspo import token_kl

    logprobs = torch.log(torch.tensor([[0.5, 0.25]]))
    ref = torch.log(torch.tensor([[0.25, 0.5]]))
    d = torch.tensor([[-math.log(2.0), math.log(2.0)]])  # log ref - log policy
    torch.testing.assert_close(token_kl(logprobs, ref, "k1"), -d)
    torch.testing.assert_close(token_kl(logprobs, ref, "k2"), d * d / 2)
    torch.testing.assert_close(token_kl(logprobs, ref, "k3"), torch.exp(d) - d - 1)
    assert (token_kl(logprobs, ref, "k3") > 0).all()
    assert token_kl(ref, ref, "k3").abs().max().item() == 0.0  # the policy is the reference
    with pytest.raises(ValueError, match="estimator"):
        token_kl(logprobs, ref, "k4")


def test_token_kl_k3_is_clamped_where_the_policy_dropped_a_token():
    from arl.gspo import token_kl

    logprobs = torch.tensor([[-30.0]])  # the policy all but dropped a token the reference likes
    assert token_kl(logprobs, torch.tensor([[-0.7]]), "k3").item() == 10.0


def test_kl_penalty_pulls_each_sampled_token_toward_the_reference():
    """k3's gradient in log pi is 1 - ref/pi: minimising the loss lowers a token the policy
    likes more than the reference does, raises one it likes less, and leaves one alone where
    they agree. Per sequence a mean over mask tokens, over the global N like the loss."""
    from arl.gspo import kl_penalty

    logprobs = torch.log(torch.tensor([[0.9, 0.5, 0.1, 0.3]])).requires_grad_(True)
    ref = torch.log(torch.tensor([[0.5, 0.5, 0.5, 0.3]]))
    mask = torch.tensor([[1, 1, 1, 0]])
    penalty = kl_penalty(logprobs, ref, mask, num_sequences=2.0)
    d = (ref - logprobs.detach())[0, :3]
    assert penalty.item() == pytest.approx(float((torch.exp(d) - d - 1).mean() / 2), rel=1e-6)
    penalty.backward()
    grad = logprobs.grad[0]
    assert grad[0] > 0 and grad[1].item() == 0.0 and grad[2] < 0 and grad[3].item() == 0.0
    expected = (1 - torch.exp(d)) / 3 / 2  # d(k3)/d(log pi), 1/|y|, 1/N
    torch.testing.assert_close(grad[:3], expected.float(), rtol=1e-5, atol=1e-7)


def test_kl_penalty_is_split_invariant_and_weighs_rows_as_the_loss_does():
    from arl.gspo import kl_penalty

    gen = torch.Generator().manual_seed(0)
    logprobs = -torch.rand(3, 5, generator=gen) * 3
    ref = -torch.rand(3, 5, generator=gen) * 3
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [0, 1, 1, 1, 1]])
    weights = torch.tensor([0.5, 0.5, 1.0])
    whole = kl_penalty(logprobs, ref, mask, 2.0, weights, "k2")
    parts = sum(kl_penalty(logprobs[i:i + 1], ref[i:i + 1], mask[i:i + 1], 2.0,
                           weights[i:i + 1], "k2") for i in range(3))
    assert parts.item() == pytest.approx(whole.item(), rel=1e-6)
    per_row = [((ref - logprobs) ** 2 / 2)[i][mask[i].bool()].mean() for i in range(3)]
    expected = (per_row[0] * 0.5 + per_row[1] * 0.5 + per_row[2]) / 2
    assert whole.item() == pytest.approx(expected.item(), rel=1e-6)
