"""The GSPO learner step (arXiv 2507.18071): losses here, updates by a backend.

The step computes every loss; its backend (learner/backend.py: plain torch, or DeepSpeed
ZeRO 1-3) sums gradients over the data-parallel group, clips and applies them. With M ranks,
each trains on its slice of every mini-batch (learner/distributed.py).

One learner step = one rollout batch:
  1. collate the trajectories (exact sampled ids, right padding);
  2. shuffle the sequence order with a generator seeded by (seed, version), split the batch into
     `mini_batches` near-equal mini-batches, and compute `old_logprobs` for all of them under
     no_grad with the weights at the start of the step;
  3. per mini-batch: micro-batches of `micro_batch_size` accumulate gradients of a loss whose
     normaliser is the mini-batch size (so the sum equals the whole mini-batch's gradient),
     clip the grad norm, take one AdamW step. Later mini-batches are therefore off-policy and
     the clip matters. A non-finite loss or grad norm (DeepSpeed: a non-finite gradient)
     skips that optimizer step, leaving parameters and optimizer state untouched, and is
     counted;
  4. version += 1. The LR schedule counts learner steps, not optimizer steps (learner/optim.py).

old_logprobs are always recomputed here, by the learner, at the start of the step: in sync
mode they are the sampling policy's (up to engine numerics, logged as
`rollout/sampler_logprob_gap`); in async mode they are the learner's current weights, which
may be up to `max_staleness` versions ahead of the weights that sampled. The clip is thus
anchored to the learner's own policy in both modes (the decoupled objective of AReaL), and
`learner.behaviour_is_cap > 0` also weights each sequence's advantage by the truncated
behaviour ratio min(exp(mean(old - sampler)), cap) (`gspo.behaviour_weights`).

old_logprobs are computed over exactly the micro-batches (same rows, same trimmed shapes) that
training later runs, so before the first update `logprobs == old_logprobs` bit for bit and the
first mini-batch's ratios are exactly 1.

Precision: the learner always keeps fp32 weights and computes in fp32, whatever `dtype` (the
rollout engine's dtype) says. AdamW on bf16 weights loses small updates. fp32 master weights
with bf16 autocast compute ran faster on this CPU (one step of 8 x 256 tokens of a 3.3M-param
Qwen2, 2 threads: fp32 0.45-0.56 s, autocast 0.28-0.36 s), but the bf16 forward adds ~3e-4 of
noise to the sequence log-ratio after an update (measured: mean |autocast - fp32| of
log s_i = 2.8e-4..3.7e-4 for updates of 1e-5..1e-3), the same size as GSPO's clip range
(3e-4 / 4e-4): the clip decision would be noise. So fp32 it is; `export_weights` gives fp32
arrays and the engine rounds them to its own dtype.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from arl import gspo
from arl.config import LearnerConfig
from arl.dtypes import DTYPES
from arl.types import Histogram, Trajectory
from learner import distributed
from learner.backend import make_backend
from learner.checkpoint import LearnerState
from learner.collate import Batch, collate
from learner.lora import apply_lora
from learner.model import load_model, set_torch_threads, token_logprobs
from learner.optim import lr_factor


@dataclass(frozen=True)
class _MiniResult:
    """One optimizer step's outcome."""

    loss: float  # sum of the micro-batch losses = the mini-batch loss
    grad_norm: float  # before clipping
    applied: bool  # False: non-finite loss or grad norm, step skipped
    outputs: list[gspo.LossOutput]
    tokens: int  # non-pad tokens through forward + backward
    lengths: list[torch.Tensor]  # [b] response lengths (mask tokens), one per output


class GSPOLearner:
    """Trains a causal LM with GSPO on trajectories' exact token ids. Plain class: Ray wraps it
    in actors/. Same seed + same inputs -> identical metrics and weights."""

    def __init__(
        self, model_path: str, cfg: LearnerConfig, dtype: str, total_steps: int, seed: int
    ):
        """Load the model at `model_path` (fp32, train mode), AdamW and the LR schedule.

        dtype: the rollout engine's dtype (auto | bfloat16 | float32); the learner trains in fp32
        either way (module docstring). total_steps: learner steps in the run (cosine length).
        Raises ValueError for an unknown dtype or loss, or a model with dropout (the trained
        policy must be the sampling policy, or ratios compare two different functions).
        """
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
        if cfg.loss not in gspo.LOSSES:
            raise ValueError(f"loss must be one of {sorted(gspo.LOSSES)}, got {cfg.loss!r}")
        set_torch_threads(cfg.cpus)
        self.cfg = cfg
        self.dtype = dtype
        self.total_steps = total_steps
        self.seed = seed
        # learner.gpus > 0: the GPU Ray reserved for this actor (the only one it sees).
        if cfg.gpus > 0 and not torch.cuda.is_available():
            raise RuntimeError("learner.gpus > 0 but this process sees no CUDA GPU")
        self.device = torch.device("cuda" if cfg.gpus > 0 else "cpu")
        self.model, tokenizer = load_model(model_path, "float32")
        self.model.to(self.device)
        if cfg.lora.rank > 0:  # adapters only: AdamW state for them alone (learner/lora.py)
            self.model = apply_lora(self.model, cfg.lora)
        _require_no_dropout(self.model)
        self.model.train()
        if tokenizer.pad_token_id is None:
            raise ValueError(f"tokenizer at {model_path!r} has no pad token")
        self.pad_id = int(tokenizer.pad_token_id)
        self.loss_fn = gspo.LOSSES[cfg.loss]
        self.backend = make_backend(self.model, cfg, self.device)  # optimizer, reductions
        self.version = 0  # learner steps done
        self._filler: Batch | None = None  # one row of the current batch (_fill)
        self.skipped_steps = 0  # skipped optimizer steps, whole run
        self.skipped_in_row = 0  # skipped optimizer steps since the last applied one

    def join_group(self, rank: int, world: int, address: str, port: int) -> None:
        """Become rank `rank` of `world` data-parallel learners (learner/distributed.py):
        from now on each step trains on this rank's slice and sums gradients over the group."""
        self.backend.join_group(rank, world, address, port)

    @property
    def rank(self) -> int:
        """This learner's data-parallel rank (0 outside a group)."""
        return self.backend.rank

    @property
    def world(self) -> int:
        """The data-parallel group size (1 outside a group)."""
        return self.backend.world

    @property
    def lr(self) -> float:
        """The learning rate the next learner step will use."""
        cfg = self.cfg
        factor = lr_factor(self.version, cfg.warmup_steps, self.total_steps, cfg.lr_schedule)
        return cfg.lr * factor

    def step(
        self, trajectories: Sequence[Trajectory], advantages: np.ndarray, temperature: float = 1.0
    ) -> dict[str, float | Histogram]:
        """One learner step on a rollout batch; returns metrics.

        advantages [B], one per trajectory; temperature: the sampling temperature, so logprobs
        are those of softmax(logits / temperature), like sampler_logprobs. `learner/loss` and
        `learner/grad_norm` (pre-clip) are means over the optimizer steps that were applied
        (NaN if none was); `learner/skipped_steps` counts this step's skipped ones and
        `learner/skipped_in_row` the skipped ones since the last applied step (across steps).
        An empty batch changes nothing but the version.
        """
        lr = self.lr
        if not trajectories:  # every group was masked: nothing to learn from, time moves on
            self.version += 1
            return {"learner/loss": math.nan, "learner/grad_norm": math.nan, "learner/lr": lr,
                    "learner/skipped_steps": 0.0,
                    "learner/skipped_in_row": float(self.skipped_in_row),
                    "perf/train_tokens": 0.0}
        self.backend.set_lr(lr)
        batch = collate(trajectories, advantages, self.pad_id)
        self._filler = batch.select(np.array([0]))  # see _passes
        minis = self._mini_batches(batch, temperature)
        results = [self._optimizer_step(mini, size, temperature) for mini, size in minis]
        outputs = [o for r in results for o in r.outputs]
        lengths = [n for r in results for n in r.lengths]
        if self.world > 1:  # every rank reports on the whole batch
            outputs, lengths = self._gathered(outputs, lengths)
        applied = [r for r in results if r.applied]
        skipped = len(results) - len(applied)
        self.version += 1
        self.skipped_steps += skipped
        for r in results:
            self.skipped_in_row = 0 if r.applied else self.skipped_in_row + 1
        return {
            "learner/loss": _mean([r.loss for r in applied]),
            "learner/grad_norm": _mean([r.grad_norm for r in applied]),
            "learner/lr": lr,
            "learner/skipped_steps": float(skipped),
            "learner/skipped_in_row": float(self.skipped_in_row),
            **gspo.diagnostics(outputs, lengths),
            "rollout/sampler_logprob_gap": self._sampler_gap(
                [m for m, _ in minis if m is not None]),
            "perf/train_tokens": float(sum(r.tokens for r in results)),
        }

    def _mini_batches(self, batch: Batch, temperature: float) -> list[tuple[Batch | None, int]]:
        """Shuffle (seeded by seed and version), split into mini-batches, attach old_logprobs.
        Returns (this rank's slice of the mini-batch, or None if it has no rows; the size of
        the whole mini-batch, the loss normaliser) per mini-batch.

        All old_logprobs are computed before any update: they are the policy at step start.
        With fewer sequences than `mini_batches`, each sequence is its own mini-batch.
        """
        order = np.random.default_rng([self.seed, self.version]).permutation(batch.size)
        count = min(self.cfg.mini_batches, batch.size)
        out: list[tuple[Batch | None, int]] = []
        for rows in np.array_split(order, count):
            mine = np.array_split(rows, self.world)[self.rank]
            mini = batch.select(mine) if len(mine) else None
            old = self._old_logprobs(mini, temperature, self._passes(len(rows)))
            if mini is not None:
                mini = mini.with_old_logprobs(old)
            if mini is not None and self.cfg.behaviour_is_cap > 0:  # off-policy correction
                mini = dataclasses.replace(mini, advantages=mini.advantages * (
                    gspo.behaviour_weights(mini.old_logprobs, mini.sampler_logprobs,
                                           mini.loss_mask, self.cfg.behaviour_is_cap)))
            out.append((mini, len(rows)))
        return out

    def _passes(self, rows: int) -> int:
        """How many forward (and backward) passes every rank makes on a mini-batch of `rows`
        sequences when the backend runs collectives inside them (`uniform_passes`): the
        largest rank share's micro-batch count. 0 otherwise: each rank makes its own count."""
        if not self.backend.uniform_passes:
            return 0
        largest = -(-rows // self.world)  # np.array_split gives the first ranks the extra row
        return -(-largest // self.cfg.micro_batch_size)

    def _fill(self, passes: int, temperature: float, backward: bool) -> None:
        """`passes` passes that change nothing, so that this rank makes as many as the others:
        a forward over one row and, with `backward`, a zero loss through every parameter."""
        for _ in range(passes):
            logprobs = self._logprobs(self._filler, temperature)
            if backward:
                self.backend.backward(logprobs.sum() * 0.0)

    @torch.no_grad()
    def _old_logprobs(self, mini: Batch | None, temperature: float,
                      passes: int) -> torch.Tensor | None:
        """[b, t] logprobs of a mini-batch (None for a rank without rows, which only makes
        its `passes`), computed micro-batch by micro-batch exactly as `_optimizer_step` will
        (same rows, same trimmed shapes), so they match bit for bit."""
        micros = mini.split(self.cfg.micro_batch_size) if mini is not None else []
        out = torch.zeros(mini.input_ids.shape, dtype=torch.float32) if micros else None
        start = 0
        for micro in micros:
            logprobs = self._logprobs(micro, temperature)
            out[start : start + micro.size, : logprobs.shape[1]] = logprobs.cpu()
            start += micro.size
        self._fill(max(0, passes - len(micros)), temperature, backward=False)
        return out

    def _logprobs(self, micro: Batch, temperature: float) -> torch.Tensor:
        """[b, t] float32 logprobs of a micro-batch's ids under the current weights, on the
        learner's device (batches stay on the CPU until here)."""
        return token_logprobs(self.backend.module, micro.input_ids.to(self.device),
                              micro.attention_mask.to(self.device), temperature)

    def _optimizer_step(self, mini: Batch | None, size: int, temperature: float) -> _MiniResult:
        """Accumulate the mini-batch gradient over micro-batches (normaliser `size`: the whole
        mini-batch); the backend sums it over the data-parallel group, clips, and steps
        unless non-finite."""
        cfg = self.cfg
        loss, outputs, lengths, tokens = 0.0, [], [], 0
        micros = mini.split(cfg.micro_batch_size) if mini is not None else []
        for micro in micros:
            logprobs = self._logprobs(micro, temperature)
            dev = self.device
            out = self.loss_fn(
                logprobs, micro.old_logprobs.to(dev), micro.advantages.to(dev),
                micro.loss_mask.to(dev),
                cfg.clip_low, cfg.clip_high, size,  # global normaliser: the whole mini-batch
            )
            self.backend.backward(out.loss)
            loss += out.loss.item()
            outputs.append(gspo.LossOutput(out.loss.detach().cpu(), out.ratio.cpu(),
                                           out.clipped_low.cpu(), out.clipped_high.cpu()))
            lengths.append(micro.loss_mask.sum(dim=-1))
            tokens += micro.num_tokens
        self._fill(max(0, self._passes(size) - len(micros)), temperature, backward=True)
        if self.world > 1:
            loss, tokens = distributed.all_reduce_sum([loss, float(tokens)], self.device)
            tokens = int(tokens)
        norm, applied = self.backend.step(math.isfinite(loss))
        return _MiniResult(loss, norm, applied, outputs, tokens, lengths)

    def _gathered(self, outputs: list[gspo.LossOutput], lengths: list[torch.Tensor]
                  ) -> tuple[list[gspo.LossOutput], list[torch.Tensor]]:
        """Every rank's per-sequence diagnostics (ratio, clip flags, response length), as one
        LossOutput and one length tensor covering the whole batch."""
        if outputs:
            mine = torch.stack([
                torch.cat([o.ratio.reshape(-1) for o in outputs]).double(),
                torch.cat([o.clipped_low.reshape(-1) for o in outputs]).double(),
                torch.cat([o.clipped_high.reshape(-1) for o in outputs]).double(),
                torch.cat([n.reshape(-1) for n in lengths]).double(),
            ], dim=1)  # [n, 4]
        else:  # this rank had no rows in any mini-batch
            mine = torch.zeros(0, 4, dtype=torch.float64)
        rows = distributed.gather_rows(mine.to(self.device), self.world).cpu()  # [B, 4]
        merged = gspo.LossOutput(torch.zeros(()), rows[:, 0], rows[:, 1], rows[:, 2])
        return [merged], [rows[:, 3]]

    def _sampler_gap(self, minis: list[Batch]) -> float:
        """Mean |sampler_logprobs - old_logprobs| over loss-mask tokens of the whole batch
        (0.0 if there are none)."""
        total = float(sum(((m.sampler_logprobs - m.old_logprobs).abs() * m.loss_mask).sum()
                          for m in minis))
        count = float(sum(m.loss_mask.sum() for m in minis))
        if self.world > 1:
            total, count = distributed.all_reduce_sum([total, count], self.device)
        return total / count if count > 0 else 0.0

    def export_weights(self) -> dict[str, np.ndarray]:
        """The weights for rollout engines: HF state_dict names -> contiguous float32 numpy
        copies (numpy has no bf16; the engine casts to its dtype). Tied weights appear under
        each of their names, sharing one array. Later steps never change the returned arrays.
        In a group every rank must call this (backends may gather); ranks other than 0
        return {}."""
        state = self.backend.full_state_dict()
        if state is None:
            return {}
        arrays: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}
        out = {}
        for name, tensor in state.items():
            key = (tensor.data_ptr(), tuple(tensor.shape))
            if key not in arrays:
                arrays[key] = np.array(tensor.detach().to(torch.float32).cpu().numpy(),
                                       copy=True)
            out[name] = arrays[key]
        return out

    def state_dict_for_checkpoint(self) -> LearnerState | None:
        """A snapshot (copies) of parameters, AdamW state, version and skip count. In a group
        every rank must call this; ranks other than 0 return None."""
        state = self.backend.checkpoint_state()
        if state is None:
            return None
        params, optimizer = state
        return LearnerState(params, optimizer, self.version, self.skipped_steps,
                            self.skipped_in_row)

    def load_checkpoint_state(self, state: LearnerState) -> None:
        """Restore a `state_dict_for_checkpoint` snapshot into this learner (same model
        architecture, any backend or group size). Raises ValueError if parameter names
        differ."""
        params = dict(self.model.named_parameters())
        if set(params) != set(state.model):
            missing, unexpected = set(params) - set(state.model), set(state.model) - set(params)
            raise ValueError(
                f"checkpoint does not fit the model: missing {sorted(missing)}, "
                f"unexpected {sorted(unexpected)}"
            )
        self.backend.load_state(state.model, state.optimizer)
        self.version = state.version
        self.skipped_steps = state.skipped_steps
        self.skipped_in_row = state.skipped_in_row


def _require_no_dropout(model: torch.nn.Module) -> None:
    """Raise if any dropout is active in train mode (RL needs the sampling policy itself)."""
    rates = {
        name: value
        for name, value in model.config.to_dict().items()
        if ("dropout" in name or name.endswith("pdrop"))
        and isinstance(value, (int, float)) and value > 0
    }
    rates.update(
        {name: mod.p for name, mod in model.named_modules()
         if isinstance(mod, torch.nn.Dropout) and mod.p > 0}
    )
    if rates:
        raise ValueError(f"the learner needs a model without dropout, found {rates}")


def _mean(values: list[float]) -> float:
    return float(np.mean(values)) if values else math.nan
