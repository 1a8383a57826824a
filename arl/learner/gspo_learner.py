"""The GSPO learner step (arXiv 2507.18071) on one rank: losses here, updates by a backend.

One learner step = one rollout batch:
  1. collate the trajectories (exact sampled ids, right padding);
  2. shuffle the sequence order with a generator seeded by (seed, version), split the batch into
     `mini_batches` near-equal mini-batches, and compute `old_logprobs` for all but the first
     under no_grad with the weights at the start of the step (the first mini-batch trains on
     those same weights, so its own forward pass gives its old_logprobs: they are its
     logprobs, detached);
  3. per mini-batch: micro-batches of `micro_batch_size` accumulate gradients of a loss whose
     normaliser is the mini-batch size (so the sum equals the whole mini-batch's gradient),
     clip the grad norm, take one AdamW step. Later mini-batches are therefore off-policy and
     the clip matters. A non-finite loss or grad norm (DeepSpeed: a non-finite gradient)
     skips that optimizer step, leaving parameters and optimizer state untouched, and is
     counted;
  4. version += 1. The LR schedule counts learner steps, not optimizer steps (arl/learner/optim.py).

With M data-parallel ranks (arl/learner/data_parallel.py), each trains on its slice of every
mini-batch and the backend (arl/learner/backend.py: torch, or DeepSpeed ZeRO 1-3) sums gradients
over the group; the step itself is written for one rank.

With `learner.loss.kl_coef` = beta > 0 the loss gains beta x `gspo.kl_penalty` against the
reference policy (arl/learner/reference.py: the model the run started from), whose log-probs
every mini-batch gets in a no-grad pass at the step's start, like old_logprobs.

old_logprobs are recomputed here, by the learner, at the start of the step: in sync mode they
are the sampling policy's (up to engine numerics, logged as `rollout/sampler_logprob_gap`); in
async mode they are the learner's current weights, up to `max_staleness` versions ahead of the
sampler's. The clip is anchored to the learner's own policy in both modes (AReaL's decoupled
objective), and `learner.loss.behaviour_is_cap > 0` also weights each sequence's advantage by the
truncated behaviour ratio (`gspo.behaviour_weights`). They are computed over exactly the
micro-batches training runs later, so before the first update `logprobs == old_logprobs` bit
for bit and the first mini-batch's ratios are exactly 1 (with the behaviour correction on,
the first mini-batch gets its own no_grad pass too: its weights are needed before its loss).

Precision: weights, gradients and AdamW state are fp32 whatever the rollout dtype.
`learner.compute.dtype` sets the compute dtype of the forward and backward: float32, or
bfloat16 with the output head, log-softmax and log-ratios in fp32 (arl/model/causal_lm.py
`compute_in`). Old and new log-probs of a step come from the same computation, so the first
mini-batch's ratios are exactly 1 in either dtype; later ones carry bf16 rounding noise, which
bench/learner_dtype.py measures against the clip range. `export_weights` gives fp32 arrays;
engines cast them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import torch

from arl import gspo
from arl.config import LearnerConfig
from arl.dtypes import DTYPES
from arl.learner import snapshot
from arl.learner.backend import make_backend
from arl.learner.collate import Batch, collate
from arl.learner.data_parallel import DataParallel
from arl.learner.mini_batch import Forward, MiniResult, optimizer_step, reference_kl, token_means
from arl.learner.optim import lr_factor
from arl.learner.reference import Reference
from arl.model.causal_lm import compute_dtype_on, load_model, set_torch_threads
from arl.model.checkpoint.store import LearnerState
from arl.model.lora import apply_lora
from arl.types import Histogram, Trajectory


def _check_names(dtype: str, cfg: LearnerConfig) -> None:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}, got {dtype!r}")
    if cfg.loss.name not in gspo.LOSSES:
        raise ValueError(f"loss must be one of {sorted(gspo.LOSSES)}, got {cfg.loss.name!r}")


class GSPOLearner:
    """Trains a causal LM with GSPO on trajectories' exact token ids. Plain class: Ray wraps it
    in actors/. Same seed + same inputs -> identical metrics and weights."""

    def __init__(
        self, model_path: str, cfg: LearnerConfig, dtype: str, total_steps: int, seed: int
    ):
        """Load the model at `model_path` (fp32, train mode), AdamW and the LR schedule.

        dtype: the rollout engine's dtype (auto | bfloat16 | float32); the learner's own
        compute dtype is `cfg.compute.dtype`, its weights fp32 either way. total_steps:
        learner steps in the run (cosine length). Raises ValueError for an unknown dtype or
        loss, or a model with dropout (the trained policy must be the sampling policy, or
        ratios compare two different functions).
        """
        _check_names(dtype, cfg)
        set_torch_threads(cfg.resources.cpus)
        self.cfg, self.total_steps, self.seed = cfg, total_steps, seed
        # learner.resources.gpus > 0: the GPU Ray reserved for this actor (the only one it sees).
        if cfg.resources.gpus > 0 and not torch.cuda.is_available():
            raise RuntimeError("learner.resources.gpus > 0 but this process sees no CUDA GPU")
        self.device = torch.device("cuda" if cfg.resources.gpus > 0 else "cpu")
        self.model, self.pad_id = _trainable_model(model_path, cfg, self.device)
        self.loss_fn = gspo.LOSSES[cfg.loss.name]
        self.backend = make_backend(self.model, cfg, self.device)  # optimizer, reductions
        compute = cfg.compute
        self.dp = DataParallel(self.backend, compute.micro_batch_size, self.device)
        self.counters = {"version": 0, "skipped_steps": 0, "skipped_in_row": 0}
        self.compute_dtype = compute_dtype_on(compute.dtype, self.device)
        self.forward = Forward(self.backend, self.device, compute.micro_batch_size,
                               self.compute_dtype, compute.share_prefix)
        self.reference = (Reference(self.model, model_path, self.forward)  # also on resume
                          if cfg.loss.kl_coef > 0 else None)

    @property
    def version(self) -> int:
        """Learner steps done."""
        return self.counters["version"]

    def join_group(self, rank: int, world: int, address: str, port: int) -> None:
        """Become rank `rank` of `world` data-parallel learners (arl/learner/distributed.py):
        from now on each step trains on this rank's slice and sums gradients over the group."""
        self.backend.join_group(rank, world, address, port)

    @property
    def lr(self) -> float:
        """The learning rate the next learner step will use."""
        optim = self.cfg.optim
        factor = lr_factor(self.version, optim.warmup_steps, self.total_steps, optim.schedule)
        return optim.lr * factor

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
            self.counters["version"] += 1
            return {**_metrics([], [], [], lr, self.counters["skipped_in_row"], (0.0, 0.0)),
                    "learner/entropy": math.nan, **_kl_metrics(self.reference, None)}
        self.backend.set_lr(lr)
        batch = collate(trajectories, advantages, self.pad_id)
        self.forward.filler = batch.select(np.array([0]))  # see Forward.fill
        minis = self._mini_batches(batch, temperature)
        results = []
        for i, (mini, size, norm) in enumerate(minis):
            result, mini, entropy = optimizer_step(self.forward, self.dp, self.cfg, self.loss_fn,
                                                   mini, size, norm, temperature)
            self._entropy_sum += entropy
            minis[i] = (mini, size, norm)  # the first one now carries its old_logprobs
            results.append(result)
        outputs, lengths = self.dp.gathered([o for r in results for o in r.outputs],
                                            [n for r in results for n in r.lengths])
        self.counters["version"] += 1
        _count_skips(self.counters, results)
        # the gap and the entropy are measured where the learner ran a pass of its own
        measured = minis if self.cfg.loss.old_logprobs == "learner" else minis[:1]
        measured = [m for m, _, _ in measured if m is not None]
        gap, gap_max, entropy = token_means(measured, self._entropy_sum, self.dp)
        metrics = _metrics(results, outputs, lengths, lr, self.counters["skipped_in_row"],
                           (gap, gap_max))
        return {**metrics, "learner/entropy": entropy,
                **_kl_metrics(self.reference, measured, self.cfg.loss.kl_estimator, self.dp)}

    def _mini_batches(self, batch: Batch, temperature: float) -> list[tuple]:
        """Shuffle (seeded by seed and version), split into mini-batches, attach old_logprobs.
        Returns (this rank's slice of the mini-batch, or None if it has no rows; the rows of
        the whole mini-batch; their summed weights, the loss normaliser N) per mini-batch.

        All old_logprobs are computed before any update: they are the policy at step start.
        The first mini-batch's are left None (its optimizer step takes them from its own
        forward pass, before its update) unless the behaviour correction needs them first.
        With `old_logprobs: sampler` the later ones are the engine's log-probs, with no pass.
        With fewer sequences than `mini_batches`, each sequence is its own mini-batch.
        """
        order = np.random.default_rng([self.seed, self.version]).permutation(batch.size)
        self._entropy_sum = 0.0
        out: list[tuple[Batch | None, int, float]] = []
        count = min(self.cfg.optim.mini_batches, batch.size)
        for i, rows in enumerate(np.array_split(order, count)):
            if self.cfg.compute.share_prefix:  # a group's rows side by side: one prompt pass
                rows = np.sort(rows)
            mine = self.dp.share(rows)
            mini = batch.select(mine) if len(mine) else None
            if self.reference is not None:  # before any update, like old_logprobs
                mini = self.reference.attach(mini, temperature, self.dp.passes(len(rows)))
            if i > 0 or self.cfg.loss.behaviour_is_cap > 0:
                mini = self._anchored(mini, len(rows), temperature)
            out.append((mini, len(rows), float(batch.weights[rows].sum())))
        return out

    def _anchored(self, mini: Batch | None, rows: int, temperature: float) -> Batch | None:
        """`mini` (this rank's slice of a mini-batch of `rows` rows) with the old log-probs
        its clip is anchored to: the engine's (`old_logprobs: sampler`, no pass), or a no-grad
        pass at the step's start, its advantages then weighted by the behaviour correction
        where that is on."""
        if self.cfg.loss.old_logprobs == "sampler":
            return mini.with_old_logprobs(mini.sampler_logprobs) if mini is not None else None
        old, entropy = self.forward.old_logprobs(mini, temperature, self.dp.passes(rows))
        self._entropy_sum += entropy
        if mini is None:
            return None
        mini = mini.with_old_logprobs(old)
        if self.cfg.loss.behaviour_is_cap > 0:  # off-policy correction
            weights = gspo.behaviour_weights(mini.old_logprobs, mini.sampler_logprobs,
                                             mini.loss_mask, self.cfg.loss.behaviour_is_cap)
            if mini.advantages.dim() == 2:  # per-token advantages: one weight a row
                weights = weights[:, None]
            mini = dataclasses.replace(mini, advantages=mini.advantages * weights)
        return mini

    def export_weights(self) -> dict[str, np.ndarray]:
        """Full fp32 weights under HF names (arl/learner/snapshot.py); {} on ranks other than 0."""
        return snapshot.export_weights(self.backend)

    def state_dict_for_checkpoint(self) -> LearnerState | None:
        """Parameters, AdamW state and counters (arl/learner/snapshot.py); None off rank 0."""
        return snapshot.checkpoint_state(self.backend, self.counters)

    def load_checkpoint_state(self, state: LearnerState) -> None:
        """Restore a `state_dict_for_checkpoint` snapshot (any backend or group size)."""
        self.counters = snapshot.load_state(self.backend, self.model, state)


def _trainable_model(model_path: str, cfg: LearnerConfig, device: torch.device
                     ) -> tuple[torch.nn.Module, int]:
    """(the model at `model_path` in fp32 and train mode on `device`, with LoRA adapters if
    configured, its pad id). Raises ValueError without a pad token or with dropout."""
    model, tokenizer = load_model(model_path, "float32")
    model.to(device)
    if device.type == "cpu":
        # torch's CPU SDPA kernel is slow for training with small bf16 heads: SmolLM2-135M,
        # 16 x 160 tokens, bf16 forward + backward took 13.3 s with it, 9.0 s eager (the
        # tiny model: 0.51 and 0.31 s, arl/warmstart/sft.py); in fp32 the two are alike.
        model.set_attn_implementation("eager")
    if cfg.lora.rank > 0:  # adapters only: AdamW state for them alone (arl/model/lora.py)
        model = apply_lora(model, cfg.lora)
    _require_no_dropout(model)
    model.train()
    if tokenizer.pad_token_id is None:
        raise ValueError(f"tokenizer at {model_path!r} has no pad token")
    return model, int(tokenizer.pad_token_id)


def _metrics(results: list[MiniResult], outputs: list[gspo.LossOutput],
             lengths: list[torch.Tensor], lr: float, skipped_in_row: int,
             gap: tuple[float, float]) -> dict[str, float | Histogram]:
    """The step's metrics; `gap`: the mean and the largest sampler/learner log-prob gap."""
    applied = [r for r in results if r.applied]
    metrics: dict[str, float | Histogram] = {
        "learner/loss": _mean([r.loss for r in applied]),
        "learner/grad_norm": _mean([r.grad_norm for r in applied]),
        "learner/lr": lr,
        "learner/skipped_steps": float(len(results) - len(applied)),
        "learner/skipped_in_row": float(skipped_in_row),
    }
    if not results:  # an empty batch
        return {**metrics, "perf/train_tokens": 0.0}
    return {**metrics, **gspo.diagnostics(outputs, lengths),
            "rollout/sampler_logprob_gap": gap[0],
            "rollout/sampler_logprob_gap_max": gap[1],
            "perf/train_tokens": float(sum(r.tokens for r in results))}


def _count_skips(counters: dict[str, int], results: list[MiniResult]) -> None:
    """Add a step's skipped optimizer steps to `counters` (in total, and in a row)."""
    for r in results:
        counters["skipped_steps"] += not r.applied
        counters["skipped_in_row"] = 0 if r.applied else counters["skipped_in_row"] + 1


def _kl_metrics(reference: Reference | None, minis: list[Batch] | None, estimator: str = "k3",
                dp: DataParallel | None = None) -> dict[str, float]:
    """`learner/kl_ref` over `minis` (NaN for an empty batch, None) where the KL penalty is
    on; nothing otherwise."""
    if reference is None:
        return {}
    return {"learner/kl_ref": math.nan if minis is None else reference_kl(minis, estimator, dp)}


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
