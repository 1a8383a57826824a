"""One mini-batch of a GSPO learner step (arl/learner/gspo_learner.py): forward passes of its
micro-batches under the current weights, and the optimizer step that accumulates their
gradients. Batches stay on the CPU until a micro-batch's pass moves it to the device."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from arl import gspo
from arl.config import LearnerConfig
from arl.learner.collate import Batch
from arl.learner.data_parallel import DataParallel
from arl.model.causal_lm import compute_in, token_logprobs


@dataclass(frozen=True)
class MiniResult:
    """One optimizer step's outcome."""

    loss: float  # sum of the micro-batch losses = the mini-batch loss
    grad_norm: float  # before clipping
    applied: bool  # False: non-finite loss or grad norm, step skipped
    outputs: list[gspo.LossOutput]
    tokens: int  # non-pad tokens through forward + backward
    lengths: list[torch.Tensor]  # [b] response lengths (mask tokens), one per output


class Forward:
    """Forward passes of micro-batches under the current weights, on the learner's device."""

    def __init__(self, backend, device: torch.device, micro_batch_size: int,
                 compute_dtype: str = "float32", share_prefix: bool = False):
        self.backend, self.device, self.micro_batch_size = backend, device, micro_batch_size
        self.compute_dtype = compute_dtype  # of the matrix products (learner.compute.dtype)
        self.share_prefix = share_prefix  # one pass per distinct prompt (arl/model/causal_lm.py)
        self.filler: Batch | None = None  # one row of the current batch (`fill`)

    def logprobs(self, micro: Batch, temperature: float, with_entropy: bool = False
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """([b, t] float32 logprobs of a micro-batch's ids, [b, t] entropy or None)."""
        with compute_in(self.backend.module, self.compute_dtype):
            out = token_logprobs(self.backend.module, micro.input_ids.to(self.device),
                                 micro.attention_mask.to(self.device), temperature,
                                 with_entropy, from_position=micro.first_loss_column,
                                 share_prefix=self.share_prefix)
        return out if with_entropy else (out, None)

    @torch.no_grad()
    def old_logprobs(self, mini: Batch | None, temperature: float,
                     passes: int) -> tuple[torch.Tensor | None, float]:
        """([b, t] logprobs of a mini-batch, the sum of the sampled tokens' entropies): None
        and 0 for a rank without rows, which only makes its `passes`. Computed micro-batch by
        micro-batch exactly as the optimizer step will (same rows, same trimmed shapes), so
        they match bit for bit."""
        micros = mini.split(self.micro_batch_size) if mini is not None else []
        out = torch.zeros(mini.input_ids.shape, dtype=torch.float32) if micros else None
        start, entropy = 0, 0.0
        for micro in micros:
            logprobs, h = self.logprobs(micro, temperature, with_entropy=True)
            out[start : start + micro.size, : logprobs.shape[1]] = logprobs.cpu()
            entropy += float((h.cpu() * micro.loss_mask).sum())
            start += micro.size
        self.fill(max(0, passes - len(micros)), temperature, backward=False)
        return out, entropy

    def fill(self, passes: int, temperature: float, backward: bool) -> None:
        """`passes` passes that change nothing, so that this rank makes as many as the others:
        a forward over one row and, with `backward`, a zero loss through every parameter."""
        for _ in range(passes):
            logprobs, _ = self.logprobs(self.filler, temperature)
            if backward:
                self.backend.backward(logprobs.sum() * 0.0)


def optimizer_step(forward: Forward, dp: DataParallel, cfg: LearnerConfig, loss_fn,
                   mini: Batch | None, size: int, norm: float, temperature: float
                   ) -> tuple[MiniResult, Batch | None, float]:
    """Accumulate the gradient of a mini-batch of `size` rows (normaliser `norm`) over
    micro-batches; the backend sums it over ranks, clips, and steps unless non-finite.
    Returns the result, the mini-batch, which carries old_logprobs, and the sum of its
    sampled tokens' entropies (0.0 unless it came without old_logprobs): a mini-batch
    without them (the first of a step) takes each micro-batch's own log-probs, detached.
    `loss_fn`: one of `gspo.LOSSES` (the learner's, which tests may wrap)."""
    backend, dev = forward.backend, forward.device
    loss, outputs, lengths, tokens, entropy_sum = 0.0, [], [], 0, 0.0
    loss_cfg = cfg.loss
    micros = mini.split(cfg.compute.micro_batch_size) if mini is not None else []
    own_old = mini is not None and mini.old_logprobs is None
    olds = []
    for micro in micros:
        logprobs, entropy = forward.logprobs(micro, temperature,
                                             loss_cfg.entropy_coef > 0 or own_old)
        if own_old:
            old = logprobs.detach()
            micro = micro.with_old_logprobs(old.cpu())
            olds.append(old.cpu())
            entropy_sum += float((entropy.detach().cpu() * micro.loss_mask).sum())
            entropy = entropy if loss_cfg.entropy_coef > 0 else None
        advantages = micro.advantages
        if loss_cfg.negative_odds_cap > 0:  # unlikelihood for settled replies that scored low
            advantages = gspo.negative_odds_weighted(advantages, micro.old_logprobs,
                                                     micro.loss_mask, loss_cfg.negative_odds_cap)
        out = loss_fn(logprobs, micro.old_logprobs.to(dev), advantages.to(dev),
                      micro.loss_mask.to(dev),
                      loss_cfg.clip_low, loss_cfg.clip_high, norm)  # global normaliser
        total = out.loss
        if entropy is not None:  # the exploration bonus, with the same normaliser
            total = total - loss_cfg.entropy_coef * gspo.entropy_bonus(
                entropy, micro.loss_mask.to(dev), norm, micro.weights.to(dev),
                top_k=loss_cfg.entropy_tokens)
        if loss_cfg.kl_coef > 0:  # the pull toward the reference, with the same normaliser
            total = total + loss_cfg.kl_coef * gspo.kl_penalty(
                logprobs, micro.ref_logprobs.to(dev), micro.loss_mask.to(dev), norm,
                micro.weights.to(dev), loss_cfg.kl_estimator)
        backend.backward(total)
        loss += total.item()
        outputs.append(gspo.LossOutput(out.loss.detach().cpu(), out.ratio.cpu(),
                                       out.clipped_low.cpu(), out.clipped_high.cpu()))
        lengths.append(micro.loss_mask.sum(dim=-1))
        tokens += micro.num_tokens
    forward.fill(max(0, dp.passes(size) - len(micros)), temperature, backward=True)
    loss, summed_tokens = dp.sum([loss, float(tokens)])
    grad_norm, applied = backend.step(math.isfinite(loss))
    if own_old:
        mini = mini.with_old_logprobs(stack_columns(olds, mini.input_ids.shape))
    result = MiniResult(loss, grad_norm, applied, outputs, int(summed_tokens), lengths)
    return result, mini, entropy_sum


def stack_columns(pieces: list[torch.Tensor], shape: torch.Size) -> torch.Tensor:
    """Micro-batches' [b_i, t_i] rows stacked into a zero-padded [B, T] tensor."""
    out = torch.zeros(shape, dtype=torch.float32)
    start = 0
    for piece in pieces:
        out[start : start + piece.shape[0], : piece.shape[1]] = piece
        start += piece.shape[0]
    return out


def reference_kl(minis: list[Batch], estimator: str, dp: DataParallel) -> float:
    """The mean per-token KL estimate of the policy at the step's start from the reference
    (`gspo.token_kl` of old_logprobs against ref_logprobs) over the loss-mask tokens of the
    minis that carry both; 0.0 where there are none."""
    total, count = 0.0, 0.0
    for m in minis:
        if m.old_logprobs is not None and m.ref_logprobs is not None:
            total += float((gspo.token_kl(m.old_logprobs, m.ref_logprobs, estimator)
                            * m.loss_mask).sum())
            count += float(m.loss_mask.sum())
    total, count = dp.sum([total, count])
    return total / count if count > 0 else 0.0


def token_means(minis: list[Batch], entropy_sum: float, dp: DataParallel
                ) -> tuple[float, float, float]:
    """Over the loss-mask tokens of the whole batch (0.0 each if there are none): the mean and
    the largest |sampler_logprobs - old_logprobs|, and the mean entropy of the policy at the
    step's start (`entropy_sum`: this rank's sum)."""
    gaps = [(m.sampler_logprobs - m.old_logprobs).abs() * m.loss_mask for m in minis]
    total = float(sum(g.sum() for g in gaps))
    largest = max((float(g.max()) for g in gaps if g.numel()), default=0.0)
    count = float(sum(m.loss_mask.sum() for m in minis))
    total, entropy, count = dp.sum([total, entropy_sum, count])
    (largest,) = dp.max([largest])
    return (total / count, largest, entropy / count) if count > 0 else (0.0, 0.0, 0.0)
