"""GSPO loss math: pure functions, tensors in, tensors out.

Group Sequence Policy Optimization (Zheng et al., arXiv 2507.18071). For G responses y_i to one
start state with rewards r_i:

    A_i = (r_i - mean(r)) / (std(r) + eps)                                  group advantage
    s_i = exp( (1/|y_i|) * sum_t mask_t * [log pi(y_i,t) - log pi_old(y_i,t)] )
    L   = -(1/N) sum_i min( s_i A_i , clip(s_i, 1-clip_low, 1+clip_high) A_i )

|y_i| counts loss_mask=1 tokens only; N (`num_sequences`) is the GLOBAL number of sequences in
the optimizer step, so summing the losses (and gradients) of micro-batches or data-parallel
ranks gives exactly the full-batch loss (and gradient). Log-ratios are computed in fp32 (or
float64 if the inputs already are). Gradients flow through `logprobs` only: `old_logprobs` and
`advantages` are detached. A row with no mask tokens contributes 0 to every loss (it still
counts in N, which the caller chooses).

Clip flags, per sequence, as float32 in [0, 1] (one dtype for all losses, so `diagnostics`
averages them alike). Both mark exactly where the clipped branch of the min is active and the
gradient is zero:
    clipped_low  = ratio < 1 - clip_low  AND A < 0
    clipped_high = ratio > 1 + clip_high AND A > 0
For gspo / gspo_token every token shares the sequence ratio s_i, so the flags are exactly 0.0 or
1.0. For grpo they are the fraction of the sequence's mask tokens whose token ratio is clipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from arl.credit import ADVANTAGE_SCALES
from arl.schema import LOSS_NAMES
from arl.types import Histogram


class LossOutput(NamedTuple):
    loss: Tensor  # [] fp32 scalar; carries the graph to logprobs
    ratio: Tensor  # [B] detached: s_i (gspo, gspo_token); mean token ratio over mask (grpo)
    clipped_low: Tensor  # [B] float32 detached, see module docstring
    clipped_high: Tensor  # [B] float32 detached, see module docstring


def group_advantages(rewards: Tensor, eps: float = 1e-6, scale: str = "std") -> Tensor:
    """A = (r - mean) / (std + eps) within each group (scale "std", GRPO's and GSPO's), or
    A = r - mean (scale "none", Dr. GRPO's). rewards [N, G] -> [N, G].

    std is the population std (unbiased=False): the group is the whole sample we normalise, and
    G=1 then gives std 0 instead of NaN. A group whose rewards are all equal gets exact zeros.
    Dividing by each group's std gives every group the same weight whatever its stakes: where
    a group's members share the env's random numbers (a deal, an opponent's seed), a group in
    which one action wins by 2 and one in which it loses by 1 cancel exactly, and the action
    that is better in expectation gets no gradient. Scale "none" keeps the stakes.
    """
    if scale not in ADVANTAGE_SCALES:
        raise ValueError(f"scale must be one of {ADVANTAGE_SCALES}, not {scale!r}")
    r = rewards if rewards.is_floating_point() else rewards.float()  # [N, G]
    mean = r.mean(dim=-1, keepdim=True)  # [N, 1]
    if scale == "std":
        std = r.std(dim=-1, unbiased=False, keepdim=True)  # [N, 1]
        adv = (r - mean) / (std + eps)  # [N, G]
    else:
        adv = r - mean  # [N, G]
    all_equal = (r == r[:, :1]).all(dim=-1, keepdim=True)  # [N, 1]; rounding-proof zero test
    return torch.where(all_equal, torch.zeros_like(adv), adv)


def informative_groups(rewards: Tensor) -> Tensor:
    """Groups whose rewards are not all equal: the only ones with a non-zero advantage, so
    the only ones that teach anything (DAPO's dynamic sampling keeps these). rewards [N, G]
    -> [N] bool."""
    return ~(rewards == rewards[:, :1]).all(dim=-1)


def negative_odds_weighted(advantages: Tensor, old_logprobs: Tensor, loss_mask: Tensor,
                           cap: float) -> Tensor:
    """Each negative advantage times its sequence's odds p / (1 - p) under the policy at the
    step's start (p = exp(sum_t mask * old_logprobs)), clamped to [1, cap]; positive ones
    unchanged. advantages [B] or [B, T], old_logprobs, loss_mask [B, T] -> as advantages.

    The policy gradient of a sampled reply y is A * grad log p(y), and grad log p(y) of a
    near-certain reply vanishes: a reply the policy has settled on keeps almost all of its
    mass however often it scores below the rest. Weighted by its odds, a negative sample's
    gradient is |A| times that of unlikelihood, -log(1 - p(y)) (Welleck et al., arXiv
    1908.04319), which stays of order |A| as p -> 1; the cap bounds it, and a floor of 1
    keeps unlikely replies at the plain policy gradient."""
    if cap < 1:
        raise ValueError(f"cap must be >= 1, got {cap}")
    dtype = _compute_dtype(old_logprobs)
    mask = loss_mask.to(dtype)  # [B, T]
    p = torch.exp((old_logprobs.detach().to(dtype) * mask).sum(dim=-1))  # [B] p(y)
    weight = (p / (1.0 - p).clamp(min=1e-12)).clamp(min=1.0, max=cap)  # [B] capped odds
    weight = weight[:, None] if advantages.dim() == 2 else weight
    adv = advantages.to(dtype)
    return torch.where(adv < 0, adv * weight, adv).to(advantages.dtype)


def _compute_dtype(x: Tensor) -> torch.dtype:
    return torch.promote_types(x.dtype, torch.float32)  # fp32, or fp64 if already fp64


def _per_token(advantages: Tensor) -> Tensor:
    """[B] or [B, T] advantages as [B, 1] or [B, T], to broadcast against token ratios."""
    return advantages if advantages.dim() == 2 else advantages[:, None]


def _masked_mean(values: Tensor, loss_mask: Tensor) -> Tensor:
    """Mean of values [B, T] over mask=1 tokens -> [B]; a row without mask tokens gives 0."""
    mask = loss_mask.to(values.dtype)  # [B, T]
    count = mask.sum(dim=-1)  # [B]
    return (values * mask).sum(dim=-1) / count.clamp(min=1.0)


def sequence_log_ratio(logprobs: Tensor, old_logprobs: Tensor, loss_mask: Tensor) -> Tensor:
    """log s_i = (1/|y_i|) sum_t mask * (logprobs - old_logprobs), in fp32. [B, T] x3 -> [B]."""
    dtype = _compute_dtype(logprobs)
    diff = logprobs.to(dtype) - old_logprobs.detach().to(dtype)  # [B, T]
    return _masked_mean(diff, loss_mask)  # [B]


def _clipped_surrogate(
    ratio: Tensor, adv: Tensor, clip_low: float, clip_high: float
) -> tuple[Tensor, Tensor, Tensor]:
    """min(ratio*A, clip(ratio)*A) and the low/high clip flags; ratio and adv broadcast."""
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    surrogate = torch.minimum(ratio * adv, clipped * adv)
    low = (ratio.detach() < 1.0 - clip_low) & (adv < 0)
    high = (ratio.detach() > 1.0 + clip_high) & (adv > 0)
    return surrogate, low, high


def _check(num_sequences: float) -> None:
    if num_sequences <= 0:
        raise ValueError(f"num_sequences must be positive, got {num_sequences}")


def gspo_loss(
    logprobs: Tensor,  # [B, T] under the weights being trained
    old_logprobs: Tensor,  # [B, T] same tokens, weights at the start of the learner step
    advantages: Tensor,  # [B] one per sequence
    loss_mask: Tensor,  # [B, T] 1 = token sampled by the policy
    clip_low: float,
    clip_high: float,
    num_sequences: float,  # N: global sequences in the optimizer step
) -> LossOutput:
    """GSPO (arXiv 2507.18071): L = -(1/N) sum_i min(s_i A_i, clip(s_i) A_i)."""
    _check(num_sequences)
    if advantages.dim() != 1:
        raise ValueError("gspo_loss takes one advantage per sequence [B]; per-token "
                         "advantages need gspo_token_loss (or grpo_loss)")
    log_ratio = sequence_log_ratio(logprobs, old_logprobs, loss_mask)  # [B]
    ratio = torch.exp(log_ratio)  # [B] s_i
    adv = advantages.detach().to(ratio.dtype)  # [B]
    surrogate, low, high = _clipped_surrogate(ratio, adv, clip_low, clip_high)  # [B]
    has_tokens = loss_mask.sum(dim=-1) > 0  # [B]
    surrogate = torch.where(has_tokens, surrogate, torch.zeros_like(surrogate))
    loss = -surrogate.sum() / num_sequences
    return LossOutput(loss, ratio.detach(), low.float(), high.float())


def gspo_token_loss(
    logprobs: Tensor,  # [B, T]
    old_logprobs: Tensor,  # [B, T]
    advantages: Tensor,  # [B] broadcast to every token of the sequence
    loss_mask: Tensor,  # [B, T]
    clip_low: float,
    clip_high: float,
    num_sequences: float,
) -> LossOutput:
    """GSPO-token (arXiv 2507.18071): s_i,t = sg[s_i] * pi(y_t) / sg[pi(y_t)].

    L = -(1/N) sum_i (1/|y_i|) sum_t min(s_i,t A_i,t, clip(s_i,t) A_i,t). `advantages` is
    [B] (A_i,t = A_i: then the loss value and gradient equal gspo_loss's exactly) or [B, T]
    per token (turn-level credit, arl/credit.py). s_i,t has the value of s_i. The clip flags
    use each sequence's mean advantage over its mask tokens.
    """
    _check(num_sequences)
    dtype = _compute_dtype(logprobs)
    lp = logprobs.to(dtype)  # [B, T]
    seq_ratio = torch.exp(sequence_log_ratio(logprobs, old_logprobs, loss_mask)).detach()  # [B]
    token_ratio = seq_ratio[:, None] * torch.exp(lp - lp.detach())  # [B, T], value = s_i
    adv = advantages.detach().to(dtype)  # [B] or [B, T]
    surrogate, _, _ = _clipped_surrogate(token_ratio, _per_token(adv), clip_low, clip_high)
    loss = -_masked_mean(surrogate, loss_mask).sum() / num_sequences
    seq_adv = _masked_mean(adv, loss_mask) if adv.dim() == 2 else adv  # [B]
    _, low, high = _clipped_surrogate(seq_ratio, seq_adv, clip_low, clip_high)  # [B] flags
    return LossOutput(loss, seq_ratio, low.float(), high.float())


def grpo_loss(
    logprobs: Tensor,  # [B, T]
    old_logprobs: Tensor,  # [B, T]
    advantages: Tensor,  # [B]
    loss_mask: Tensor,  # [B, T]
    clip_low: float,
    clip_high: float,
    num_sequences: float,
) -> LossOutput:
    """Token-level GRPO / PPO-clip, for comparison runs (arXiv 2402.03300).

    r_t = exp(logprob_t - old_t); L = -(1/N) sum_i (1/|y_i|) sum_t min(r_t A_i, clip(r_t) A_i).
    Token ratios drift far more than GSPO's sequence mean, so pass PPO-sized clips (e.g. 0.2),
    not GSPO's 3e-4 / 4e-4. ratio = mean token ratio over mask tokens (1 for an empty row);
    clipped_low / clipped_high = fraction of the sequence's mask tokens that are clipped.
    """
    _check(num_sequences)
    dtype = _compute_dtype(logprobs)
    token_ratio = torch.exp(logprobs.to(dtype) - old_logprobs.detach().to(dtype))  # [B, T]
    adv = advantages.detach().to(dtype)  # [B], or [B, T] per token
    surrogate, low, high = _clipped_surrogate(token_ratio, _per_token(adv), clip_low,
                                              clip_high)
    loss = -_masked_mean(surrogate, loss_mask).sum() / num_sequences
    has_tokens = loss_mask.sum(dim=-1) > 0  # [B]
    mean_ratio = _masked_mean(token_ratio.detach(), loss_mask)  # [B]
    ratio = torch.where(has_tokens, mean_ratio, torch.ones_like(mean_ratio))
    low_frac = _masked_mean(low.to(dtype), loss_mask).float()  # [B]
    high_frac = _masked_mean(high.to(dtype), loss_mask).float()  # [B]
    return LossOutput(loss, ratio, low_frac, high_frac)


def entropy_bonus(entropy: Tensor, loss_mask: Tensor, num_sequences: float,
                  weights: Tensor | None = None, top_k: int = 0) -> Tensor:
    """B = (1/N) sum_i w_i (1/|y_i|) sum_t mask_t * H_i,t: the policy's token entropy,
    averaged per sequence like GSPO's ratio and normalised by the same global N, so that
    `loss - coef * B` keeps the loss invariant to micro-batch and rank splits. `weights`
    [B] are the sequences' weights in N (1/k for each row of an episode of k rows; None: 1).
    With `top_k` > 0 the mean runs over each sequence's k highest-entropy mask tokens only
    (`decision_tokens`), all of them where it has fewer.
    entropy, loss_mask [B, T] -> [] (differentiable through `entropy`)."""
    _check(num_sequences)
    dtype = _compute_dtype(entropy)
    if top_k > 0:
        loss_mask = decision_tokens(entropy, loss_mask, top_k)
    per_sequence = _masked_mean(entropy.to(dtype), loss_mask)  # [B]
    if weights is not None:
        per_sequence = per_sequence * weights.to(dtype)
    return per_sequence.sum() / num_sequences


def decision_tokens(entropy: Tensor, loss_mask: Tensor, k: int) -> Tensor:
    """[B, T] bool: each row's k mask tokens of highest entropy (ties broken arbitrarily), or
    all its mask tokens where it has k or fewer. In a tool call nearly every token is fixed by
    the format and the few uncertain ones are what the policy chooses (a move's square): a
    bonus over every token weighs each of those 1/|y| and pushes the format's tokens toward
    uncertainty (malformed calls) as well; over these k it weighs them 1/k and leaves the
    format alone.
    entropy, loss_mask [B, T] -> [B, T]; the choice is not differentiated."""
    mask = loss_mask.bool()  # [B, T]
    k = min(k, mask.shape[-1])
    scores = entropy.detach().float().masked_fill(~mask, float("-inf"))  # [B, T]
    top = torch.topk(scores, k, dim=-1, sorted=False).indices  # [B, k]
    chosen = torch.zeros_like(mask).scatter_(-1, top, True)  # [B, T]
    return chosen & mask


KL_ESTIMATORS = ("k1", "k2", "k3")


def token_kl(logprobs: Tensor, ref_logprobs: Tensor, estimator: str = "k3") -> Tensor:
    """Per-token estimates of KL(pi || pi_ref) on tokens sampled from pi (Schulman, "Approximating
    KL divergence", 2020), with d = log pi_ref - log pi:
        k1 = -d                     unbiased, can be negative
        k2 = d^2 / 2                its gradient on samples of pi is KL(pi || pi_ref)'s
        k3 = exp(d) - d - 1         unbiased, >= 0, low variance (TRL's beta, verl's low_var_kl);
                                    its gradient on samples of pi is KL(pi_ref || pi)'s, which
                                    grows without bound as pi drops a reply pi_ref still gives
                                    mass to: a decision cannot saturate far from the reference
    logprobs (differentiable), ref_logprobs (detached) [B, T] -> [B, T] in fp32 (fp64 if the
    inputs are)."""
    dtype = _compute_dtype(logprobs)
    d = ref_logprobs.detach().to(dtype) - logprobs.to(dtype)  # [B, T]
    if estimator == "k1":
        return -d
    if estimator == "k2":
        return 0.5 * d * d
    if estimator == "k3":
        # clamped like verl's low_var_kl: exp(d) of a token the policy has all but dropped
        # would otherwise dominate a whole batch
        return (torch.exp(d.clamp(max=20.0)) - d - 1.0).clamp(max=10.0)
    raise ValueError(f"estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, loss_mask: Tensor, num_sequences: float,
               weights: Tensor | None = None, estimator: str = "k3") -> Tensor:
    """K = (1/N) sum_i w_i (1/|y_i|) sum_t mask_t * kl_i,t (`token_kl`): the reference penalty,
    averaged per sequence like GSPO's ratio and normalised by the same global N, so that
    `loss + beta * K` keeps the loss invariant to micro-batch and rank splits (the same
    shape as `entropy_bonus`). logprobs, ref_logprobs, loss_mask [B, T], weights [B] -> []
    (differentiable through `logprobs`)."""
    _check(num_sequences)
    per_sequence = _masked_mean(token_kl(logprobs, ref_logprobs, estimator), loss_mask)  # [B]
    if weights is not None:
        per_sequence = per_sequence * weights.to(per_sequence.dtype)
    return per_sequence.sum() / num_sequences


def behaviour_weights(old_logprobs: Tensor, sampler_logprobs: Tensor, loss_mask: Tensor,
                      cap: float) -> Tensor:
    """Truncated importance weights for a behaviour policy that lags the learner (async
    mode): w_i = min(exp(mean_t over mask of (old_logprobs - sampler_logprobs)), cap).

    old_logprobs, sampler_logprobs, loss_mask [B, T] -> w [B], detached fp32. Sequence-level
    and length-normalised like GSPO's own ratio, so a long response is not weighted by a
    product of many token ratios. Scaling the advantages by w corrects the gap between the
    policy that sampled (behaviour) and the one the clip is anchored to (old); the cap bounds
    the variance. A row without mask tokens gets weight min(1, cap).
    """
    mask = loss_mask.to(_compute_dtype(old_logprobs))  # [B, T]
    diff = (old_logprobs.detach() - sampler_logprobs.detach()) * mask  # [B, T]
    mean = diff.sum(-1) / mask.sum(-1).clamp(min=1.0)  # [B]
    return torch.exp(mean).clamp(max=cap).float()  # [B]


LENGTH_BINS = (8, 16, 32, 64, 128)  # response-length bin upper bounds for clip fractions


def diagnostics(outputs: Sequence[LossOutput],
                lengths: Sequence[Tensor] = ()) -> dict[str, float | Histogram]:
    """Aggregate the per-sequence fields of all micro-batches of a step into `gspo/...` metrics.

    Every sequence weighs the same; clip fractions are fractions of sequences (for grpo, the
    sequence-weighted mean of per-sequence token clip fractions). `gspo/ratio_hist` is the
    distribution of the sequence ratios. Given `lengths` ([B] mask-token counts, one per
    output), `gspo/clip_fraction_len_le<n>` is the clip fraction (low + high) of the
    sequences with a response length in (previous bound, n]; `_gt128` the rest. Empty bins
    are left out.
    """
    if not outputs:
        raise ValueError("diagnostics needs at least one LossOutput")
    ratio = torch.cat([o.ratio.reshape(-1).double() for o in outputs])  # [sum B]
    low = torch.cat([o.clipped_low.reshape(-1).double() for o in outputs])  # [sum B]
    high = torch.cat([o.clipped_high.reshape(-1).double() for o in outputs])  # [sum B]
    metrics: dict[str, float | Histogram] = {
        "gspo/ratio_mean": ratio.mean().item(),
        "gspo/ratio_min": ratio.min().item(),
        "gspo/ratio_max": ratio.max().item(),
        "gspo/clip_fraction_low": low.mean().item(),
        "gspo/clip_fraction_high": high.mean().item(),
        "gspo/ratio_hist": Histogram.of(ratio.numpy(), bins=16),
    }
    if lengths:
        length = torch.cat([n.reshape(-1).double() for n in lengths])  # [sum B]
        edges = torch.tensor(LENGTH_BINS, dtype=torch.float64)
        bins = torch.bucketize(length, edges)  # [sum B] in 0..len(LENGTH_BINS): (lo, hi]
        names = [f"le{n}" for n in LENGTH_BINS] + [f"gt{LENGTH_BINS[-1]}"]
        for b, name in enumerate(names):
            rows = bins == b
            if rows.any():
                clipped = (low[rows] + high[rows]).mean().item()
                metrics[f"gspo/clip_fraction_len_{name}"] = clipped
    return metrics


LossFn = Callable[[Tensor, Tensor, Tensor, Tensor, float, float, int], LossOutput]

# The losses `learner.loss.name` names (arl/schema_learner.py: LOSS_NAMES lists the same, in order).
LOSSES: dict[str, LossFn] = dict(zip(LOSS_NAMES, (gspo_loss, gspo_token_loss, grpo_loss),
                                     strict=True))
