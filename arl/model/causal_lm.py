"""Loading local causal LMs, CPU thread settings, and per-token log-probs for the learner."""

from __future__ import annotations

import contextlib
import inspect
import os
from collections.abc import Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.cache_utils import DynamicLayer
from transformers.utils import logging as hf_logging

from arl.dtypes import resolve as resolve_dtype

# A progress bar per weight load is noise in every worker's log (and in `arl eval`).
hf_logging.disable_progress_bar()

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a concrete dtype name (bfloat16 | float32; resolve `auto` first
    with arl.dtypes.resolve). Raises ValueError for any other name."""
    if name not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {name!r}")
    return _DTYPES[name]


def compute_dtype_on(name: str, device: torch.device) -> str:
    """The concrete dtype of the learner's matrix products (`learner.compute.dtype`, `auto`
    resolved for `device`)."""
    on_gpu = device.type == "cuda"
    return resolve_dtype(name, on_gpu, on_gpu and torch.cuda.is_bf16_supported())


@contextlib.contextmanager
def compute_in(model: torch.nn.Module, dtype: str) -> Iterator[None]:
    """Run `model`'s forward (and the backward it records) with matrix products in `dtype`
    (bfloat16 | float32) while weights, gradients and optimizer state keep their own dtype
    (fp32 in the learner: mixed precision with fp32 master weights).

    In bfloat16 the output head still runs in fp32 on the fp32 final hidden state: the
    log-probs, the sequence log-ratio and the clip decision are then free of bf16 logit
    rounding (a bf16 logit of size 10 is off by up to 0.03), and the residual stream stays
    fp32 because embeddings and norms are outside autocast. Nothing changes for float32."""
    if dtype == "float32":
        yield
        return
    if dtype != "bfloat16":
        raise ValueError(f"compute dtype must be bfloat16 | float32, got {dtype!r}")
    head = _output_head(model)
    device = head.weight.device.type

    def fp32_head(hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device, enabled=False):
            return head.__class__.forward(head, hidden.float())

    head.forward = fp32_head  # an instance attribute: shadows the class's forward
    try:
        with torch.autocast(device, dtype=torch.bfloat16):
            yield
    finally:
        del head.forward


def _output_head(model: torch.nn.Module) -> torch.nn.Module:
    """The lm head of an HF model, of a peft model around one, or of a DeepSpeed engine's."""
    inner = model.module if hasattr(model, "module") and not hasattr(
        model, "get_output_embeddings") else model
    return inner.get_output_embeddings()


_LOGPROB_CHUNK_TOKENS = 4096  # rows of logits turned into fp32 at once (bounds peak memory)
_interop_threads_set = False


def load_model(
    path: str, dtype: str = "bfloat16"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a local HF causal-LM folder (never a hub id: nothing is downloaded) as
    (model in eval mode with weights in `dtype`, its tokenizer).

    Raises FileNotFoundError if `path` is not a folder holding config.json, ValueError for an
    unknown dtype (bfloat16 | float32)."""
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {dtype!r}")
    if not os.path.isfile(os.path.join(path, "config.json")):
        what = "has no config.json (not a model folder)" if os.path.isdir(path) else "is missing"
        raise FileNotFoundError(
            f"model directory {path!r} {what}; build the tiny one with `arl warmstart`"
        )
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=_DTYPES[dtype], local_files_only=True
    )
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model.eval(), tokenizer


def set_torch_threads(n: int) -> None:
    """Use `n` intra-op threads (callable any time). Inter-op threads are set to `n` on the
    first call only: torch allows that once per process, and only before any parallel work."""
    global _interop_threads_set
    torch.set_num_threads(n)
    if not _interop_threads_set:
        _interop_threads_set = True
        try:
            torch.set_num_interop_threads(n)
        except RuntimeError:
            pass  # parallel work already ran in this process: torch keeps its setting


def token_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    from_position: int = 1,
    share_prefix: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs [B, T] float32: out[b, t] = log p(input_ids[b, t] | input_ids[b, <t])
    under softmax(logits / temperature). out[b, t] = 0 unless tokens t-1 and t are both attended
    (so column 0, padding, and the first real token of a left-padded row are 0). With
    `with_entropy`, also the entropy [B, T] of the distribution each token was drawn from
    (0 where the log-prob is 0).

    Left, right or no padding all work: position ids follow the attention mask. Differentiable
    when grad is enabled. The fp32 log-softmax runs over chunks of tokens, and with grad on each
    chunk is recomputed in backward instead of kept, so no [B, T, V] fp32 tensor ever lives.

    `from_position` p: only columns p.. are wanted (the learner passes the first column of
    any row's loss mask); the output head and the log-softmax then run on the last T - p + 1
    positions only and columns before p are 0. For a real model with a large vocabulary and
    a long prompt the head is most of the forward pass (SmolLM2-135M: 49,152 x 576).

    `share_prefix` (with p > 1, right padding, a model whose cache holds plain keys and
    values): rows whose first p - 1 ids are the same (the G samples of a start state) run
    those ids once; their keys and values are copied to every such row, which then runs
    only its own columns p - 1.. (gradients flow back through the copies). The result
    equals the plain pass up to rounding; for one-turn episodes the prompt is most of a row.
    """
    input_ids = input_ids.long()
    attention_mask = attention_mask.long()
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    length = input_ids.shape[1]
    first = min(max(int(from_position), 1), length)  # column 0 has no log-prob
    keep = length - first + 1 if first > 1 and takes_logits_to_keep(model) else 0
    shared = _shared_prefix_logits(model, input_ids, attention_mask, position_ids, keep) \
        if share_prefix and keep else None
    logits = shared if shared is not None else model(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
        use_cache=False, **({"logits_to_keep": keep} if keep else {}),
    ).logits  # [B, T or keep, V], model dtype
    return _logprobs_of_logits(logits, input_ids, attention_mask, temperature, with_entropy)


def _logprobs_of_logits(logits: torch.Tensor, input_ids: torch.Tensor,
                        attention_mask: torch.Tensor, temperature: float, with_entropy: bool
                        ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`token_logprobs`' output from the logits [B, kept, V] of the last `kept` positions."""
    batch, length = input_ids.shape
    kept = logits.shape[1]
    flat_logits = logits.reshape(-1, logits.shape[-1])  # a view: no copy of the logits
    # row (b, t) predicts ids[b, t + 1]; the wrapped-around last column is dropped below
    flat_targets = torch.roll(input_ids[:, length - kept:], -1, dims=1).reshape(-1)
    use_checkpoint = torch.is_grad_enabled() and flat_logits.requires_grad
    chunk_fn = _chunk_logprobs_entropy if with_entropy else _chunk_logprobs
    pieces = []
    for start in range(0, flat_targets.numel(), _LOGPROB_CHUNK_TOKENS):
        rows = slice(start, start + _LOGPROB_CHUNK_TOKENS)
        args = (flat_logits[rows], flat_targets[rows], temperature)
        if use_checkpoint:
            pieces.append(checkpoint(chunk_fn, *args, use_reentrant=False))
        else:
            pieces.append(chunk_fn(*args))
    # where(), not multiply: logits at padded positions may be garbage, and NaN * 0 is NaN.
    valid = attention_mask[:, 1:].bool() & attention_mask[:, :-1].bool()

    def place(flat: torch.Tensor) -> torch.Tensor:
        # [B, kept-1]: entries T-kept+1 .. T-1; earlier columns are 0
        shifted = flat.view(batch, kept)[:, :-1]
        shifted = torch.where(valid[:, length - kept:], shifted, torch.zeros_like(shifted))
        return torch.cat([shifted.new_zeros(batch, length - kept + 1), shifted], dim=1)

    if not with_entropy:
        return place(torch.cat(pieces))
    return place(torch.cat([p[0] for p in pieces])), place(torch.cat([p[1] for p in pieces]))


def _shared_prefix_logits(model: torch.nn.Module, input_ids: torch.Tensor,
                          attention_mask: torch.Tensor, position_ids: torch.Tensor,
                          keep: int) -> torch.Tensor | None:
    """Logits [B, keep, V] of the last `keep` positions with the columns before a split run
    once per distinct prefix (see `token_logprobs`), or None where that does not pay or
    cannot apply: prefixes hold padding (left padding), or the model's cache keeps more
    than plain keys and values (linear attention, sliding windows)."""
    limit = input_ids.shape[1] - keep  # the prefix may end before the first kept position
    if limit < 1 or not bool(attention_mask[:, :limit].all()):
        return None
    split = prefix_split(input_ids[:, :limit], input_ids.shape[1])
    if split is None:
        return None
    cut, rows_of = split
    cache, kwarg = _plain_kv_cache(model)
    if cache is None:
        return None
    some_row = one_row_each(rows_of)
    prefixes = input_ids[some_row, :cut]  # [U, cut]
    model(input_ids=prefixes, attention_mask=torch.ones_like(prefixes),
          position_ids=position_ids[some_row, :cut], use_cache=True, logits_to_keep=1,
          **{kwarg: cache})
    cache.reorder_cache(rows_of)  # an index_select per layer: gradients sum back
    return model(input_ids=input_ids[:, cut:], attention_mask=attention_mask,
                 position_ids=position_ids[:, cut:], use_cache=True,
                 logits_to_keep=keep, **{kwarg: cache}).logits


_SHARE_WORTH = 0.8  # share only if it runs at most this share of the plain pass's tokens


def prefix_split(prefix_ids: torch.Tensor, length: int) -> tuple[int, torch.Tensor] | None:
    """(cut, rows_of [B]): the cut column c among 1..P of [B, P] `prefix_ids` that minimises
    the tokens two passes run, U(c) * c + B * (length - c), where U(c) is the number of
    distinct rows of ids[:, :c] and rows_of maps rows to them; None if the best is not below
    `_SHARE_WORTH` of the plain B * length. A prompt the G samples of a group share (and a
    system prompt that many groups share) is what this finds."""
    rows, columns = prefix_ids.shape
    ids = prefix_ids.numpy()
    classes = np.zeros(rows, dtype=np.int64)
    best = (_SHARE_WORTH * rows * length, 0, classes)
    for cut in range(1, columns + 1):
        pairs = np.stack([classes, ids[:, cut - 1]], axis=1)
        _, classes = np.unique(pairs, axis=0, return_inverse=True)
        distinct = int(classes.max()) + 1
        if distinct == rows:  # no row shares its prefix any more: longer cuts cost more
            break
        cost = distinct * cut + rows * (length - cut)
        if cost < best[0]:
            best = (cost, cut, classes.reshape(-1).copy())
    return (best[1], torch.from_numpy(best[2])) if best[1] else None


def one_row_each(rows_of: torch.Tensor) -> torch.Tensor:
    """[U] a row index of each class of `rows_of` [B] (classes 0..U-1; any row will do)."""
    some_row = torch.zeros(int(rows_of.max()) + 1, dtype=torch.long)
    some_row[rows_of] = torch.arange(len(rows_of))
    return some_row


def holds_plain_kv(cache: DynamicCache) -> bool:
    """Whether every layer of `cache` is a plain full-attention layer: keys and values read
    by the mask alone, so rows may share a prefix's copy and hold gaps (not sliding windows
    or linear-attention states)."""
    return bool(cache.layers) and all(type(layer) is DynamicLayer for layer in cache.layers)


def _plain_kv_cache(model: torch.nn.Module):
    """(an empty DynamicCache for the HF model inside `model`, the forward's keyword for it),
    or (None, "") if any of its layers is not a plain full-attention layer."""
    inner = _hf_model(model)
    cache = DynamicCache(config=inner.config)
    if not holds_plain_kv(cache):
        return None, ""
    params = inspect.signature(type(inner).forward).parameters
    # transformers renamed `past_key_values` to `cache` (5.2x; as arl/rollout/engines/hf.py)
    return cache, "cache" if "cache" in params else "past_key_values"


def _hf_model(model: torch.nn.Module) -> torch.nn.Module:
    """The HF model inside a DeepSpeed engine and/or a peft wrapper."""
    inner = model.module if hasattr(model, "module") and not hasattr(
        model, "get_output_embeddings") else model
    return inner.get_base_model() if hasattr(inner, "get_base_model") else inner


def takes_logits_to_keep(model: torch.nn.Module) -> bool:
    """Whether the HF model inside `model` (a peft or DeepSpeed wrapper allowed) accepts
    `logits_to_keep` (transformers' causal LMs do; remote code may not)."""
    return "logits_to_keep" in inspect.signature(type(_hf_model(model)).forward).parameters


def _chunk_logprobs(logits: torch.Tensor, targets: torch.Tensor, temperature: float):
    """[N, V] logits (any dtype), [N] targets -> [N] fp32 log-probs of the targets."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def _chunk_logprobs_entropy(logits: torch.Tensor, targets: torch.Tensor, temperature: float):
    """As `_chunk_logprobs`, and the entropy [N] of each row's distribution."""
    logp = F.log_softmax(logits.float() / temperature, dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    return logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1), entropy
