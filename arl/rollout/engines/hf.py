"""HF transformers rollout engine: batched sampling with a KV cache, on CPU.

`HFEngine` implements `arl.protocols.RolloutEngine` with a hand-written decode loop rather than
`model.generate`, so that it owns the three things RL needs exactly: the sampled token ids, the
sampler's logprob of each id, and a seeded RNG that makes a call reproducible.

Logprob convention: the reported logprob of a sampled id is taken from
log_softmax(logits / temperature) in fp32, BEFORE top-p filtering. That is the quantity a learner
recomputes from a full forward pass at the same temperature (it knows nothing of the top-p
nucleus), so sampler and learner logprobs agree up to floating-point noise and the GSPO ratio is
1 when the weights are equal. With temperature 0 (greedy) logprobs are reported at temperature 1.

This module imports torch and transformers at the top (it is the HF engine; nothing imports it
unless it is used) and never imports ray: `actors/` wraps the class with `ray.remote` elsewhere.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
from transformers.utils import logging as hf_logging

from arl.dtypes import resolve as resolve_dtype
from arl.model.causal_lm import holds_plain_kv, one_row_each, prefix_split, torch_dtype
from arl.rollout.engines.stops import default_stop_ids
from arl.rollout.engines.weights import as_tensor, check_state, complete_tied, tied_groups
from arl.types import Generation, SamplingParams

MAX_BATCH_SIZE = 64  # sequences decoded at once by default: what bounds the KV cache

hf_logging.disable_progress_bar()  # no bar per weight load in every worker's log



class HFEngine:
    """A transformers causal LM behind the RolloutEngine protocol.

    Contract:
    - `generate(prompts, params)` returns one Generation per prompt, in order. Prompts of any
      lengths are left-padded into batches of at most `max_batch_size` (longest-first, so
      similar lengths share a batch); a padded prompt yields the same tokens as the prompt alone,
      up to floating-point noise. The same prompts, params (seed included) and weights give
      identical ids and logprobs.
    - A row stops at its first stop id (kept in `token_ids`, finished=True) or after
      `max_new_tokens` ids (finished=False).
    - `update_weights(weights, version)` loads a full state dict (HF names; numpy arrays or torch
      tensors) in one `load_state_dict` call, and records `version`. Keys and shapes are checked
      before any weight changes, so a bad mapping raises ValueError and leaves the model as it was.
      For tied weights (e.g. Qwen2's `lm_head.weight` = `model.embed_tokens.weight`) either or both
      names may be given; when both are given the first name in `model.state_dict()` order wins.
    """

    def __init__(
        self,
        model_path: str,
        dtype: str = "auto",
        stop_token_ids: Sequence[int] | None = None,
        max_batch_size: int = MAX_BATCH_SIZE,
        version: int = 0,
    ) -> None:
        dtype = resolve_dtype(dtype)  # auto: bfloat16 where this CPU computes in it natively
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.dtype = torch_dtype(dtype)
        self.max_batch_size = max_batch_size
        self.version = version
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=self.dtype)
        self.model.eval()
        _prefer_eager_attention(self.model)
        # The longest prompt + completion the model takes (0: unknown); agents are held to it.
        self.max_model_len = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)
        self.model.requires_grad_(False)
        ids = default_stop_ids(self.tokenizer) if stop_token_ids is None else list(stop_token_ids)
        if not ids:
            raise ValueError("no stop token ids: pass stop_token_ids explicitly")
        self.stop_token_ids = torch.tensor(sorted(set(ids)), dtype=torch.long)
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = 0 if pad is None else pad  # any id works: pads are masked
        self._expected = {k: tuple(v.shape) for k, v in self.model.state_dict().items()}
        self._aliases = tied_groups(self.model)
        # transformers renamed `past_key_values` to `cache` (5.2x); an unknown keyword is
        # swallowed silently, and decoding without the cache reads garbage, so ask the model.
        params = inspect.signature(self.model.forward).parameters
        self.cache_kwarg = "cache" if "cache" in params else "past_key_values"

    def get_tokenizer(self) -> Any:
        """The model's tokenizer (a method, so that a Ray actor handle can fetch it)."""
        return self.tokenizer

    def close(self) -> None:
        """Drop the model so its memory can be freed; the engine is unusable afterwards."""
        self.model = None


    # ---- weights -------------------------------------------------------------------------

    def update_weights(self, weights: Mapping[str, Any], version: int) -> None:
        """Replace all weights in one `load_state_dict(strict=True)` call; see the class contract.

        numpy arrays become tensors with `torch.from_numpy` (zero-copy); the cast to the model
        dtype happens inside `load_state_dict`'s in-place copy, so no extra full copy is made.
        """
        if self.model is None:
            raise RuntimeError("engine is closed")
        state = complete_tied(dict(weights), self._aliases)
        check_state(state, self._expected)
        with warnings.catch_warnings():
            # Read-only arrays (e.g. from Ray's object store) warn on from_numpy; we never write.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            tensors = {k: as_tensor(v) for k, v in state.items()}
        with torch.no_grad():
            self.model.load_state_dict(tensors, strict=True)
        self.version = version

    # ---- sampling ------------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """Sample one turn per prompt; see the class contract."""
        if self.model is None:
            raise RuntimeError("engine is closed")
        _check_params(params)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt")
        generator = torch.Generator().manual_seed(params.seed)
        # Longest first: similar lengths share a batch, so less padding is computed.
        order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
        results: list[Generation | None] = [None] * len(prompts)
        with torch.inference_mode():
            for start in range(0, len(order), self.max_batch_size):
                chunk = order[start : start + self.max_batch_size]
                batch = _decode(self, [prompts[i] for i in chunk], params, generator)
                for i, generation in zip(chunk, batch, strict=True):
                    results[i] = generation
        return results  # type: ignore[return-value]


def _decode(engine: HFEngine, prompts: list[list[int]], params: SamplingParams,
            generator: torch.Generator) -> list[Generation]:
    """Prefill the batch once (`_prefill`), then decode one token per step with the cache.

    Rows that hit a stop id leave the batch (their cache rows are dropped), so late steps only
    pay for the rows still running.
    """
    batch_size, max_new = len(prompts), params.max_new_tokens
    cache = DynamicCache(config=engine.model.config)
    logits, attention_mask, positions = _prefill(engine, prompts, cache)
    tokens = torch.zeros(batch_size, max_new, dtype=torch.long)
    logprobs = torch.zeros(batch_size, max_new, dtype=torch.float32)
    lengths = torch.full((batch_size,), max_new, dtype=torch.long)
    finished = torch.zeros(batch_size, dtype=torch.bool)
    rows = torch.arange(batch_size)  # original row of each live batch row
    next_pos = positions[:, -1:] + 1  # [b, 1]
    for step in range(max_new):
        token, logprob = _sample(logits, params, generator)
        tokens[rows, step] = token
        logprobs[rows, step] = logprob
        stopped = torch.isin(token, engine.stop_token_ids)
        finished[rows[stopped]] = True
        lengths[rows[stopped]] = step + 1
        live = (~stopped).nonzero().squeeze(1)
        if step == max_new - 1 or live.numel() == 0:
            break
        if live.numel() < len(rows):
            rows, token, next_pos = rows[live], token[live], next_pos[live]
            attention_mask = attention_mask[live]
            # reorder_cache is an index_select on every kind of cache layer; the
            # linear-attention layers of hybrid models lack batch_select_indices.
            cache.reorder_cache(live)
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones(len(rows), 1)], 1)
        logits = _forward(engine, token[:, None], attention_mask, next_pos, cache)
        next_pos = next_pos + 1
    return _to_generations(tokens, logprobs, lengths, finished)


def _prefill(engine: HFEngine, prompts: list[list[int]], cache: DynamicCache
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the prompts into `cache`: (fp32 last logits [b, V], attention mask [b, L],
    position ids [b, L]) with one row per prompt, in order.

    Identical prompts (the G samples of a group open alike) run once: the cache rows and last
    logits of each distinct prompt are copied to every row that has it. With a cache of plain
    full-attention layers, prefixes that many distinct prompts share (a system prompt and tool
    schema, one per seat) run once too (`learner.model.prefix_split` picks the cut): their
    keys and values are copied to each prompt, which runs only its own tail, left-padded
    behind the prefix (the mask hides the gap and the positions skip it, so every token sees
    what it would see alone).
    """
    distinct: dict[tuple[int, ...], int] = {}
    rows_of = torch.tensor([distinct.setdefault(tuple(p), len(distinct)) for p in prompts])
    unique = [list(p) for p in distinct]
    cut, prefix_of = _shared_prefixes(unique, cache)
    if cut:
        prefixes = torch.tensor([unique[i][:cut] for i in one_row_each(prefix_of).tolist()])
        _forward(engine, prefixes, torch.ones_like(prefixes),
                 torch.arange(cut).expand_as(prefixes), cache)
        cache.reorder_cache(prefix_of)
    tails, tail_mask = left_pad([p[cut:] for p in unique], engine.pad_token_id)
    attention_mask = torch.cat([tail_mask.new_ones(len(unique), cut), tail_mask], dim=1)
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    logits = _forward(engine, tails, attention_mask, positions[:, cut:], cache)
    if len(distinct) < len(prompts):
        cache.reorder_cache(rows_of)
        logits, attention_mask, positions = (logits[rows_of], attention_mask[rows_of],
                                             positions[rows_of])
    return logits, attention_mask, positions


def _shared_prefixes(prompts: list[list[int]], cache: DynamicCache) -> tuple[int, torch.Tensor]:
    """(cut, prefix of each prompt [U]) where running the prompts' first `cut` ids once per
    distinct prefix pays, else (0, empty). Only a cache of plain full-attention layers may
    hold the gap between a prefix and a shorter prompt's tail (`holds_plain_kv`)."""
    none = (0, torch.zeros(0, dtype=torch.long))
    shortest = min(len(p) for p in prompts)
    if len(prompts) < 2 or shortest < 2 or not holds_plain_kv(cache):
        return none
    # every prompt keeps at least one id of its own: its tail's forward gives its logits
    head = torch.tensor([p[:shortest - 1] for p in prompts])
    split = prefix_split(head, max(len(p) for p in prompts))
    return split if split is not None else none


def _prefer_eager_attention(model: torch.nn.Module) -> None:
    """Eager attention where the model has it: torch's CPU SDPA kernel is slow for one-token
    decode queries on small heads. A demo step's 64 rollouts took 0.38 s with SDPA and 0.29 s
    eager (the tiny model, bf16); SmolLM2-135M's 32 took 6.3 and 5.2 s. Models without an
    eager path keep what they loaded with."""
    try:
        model.set_attn_implementation("eager")
    except (ValueError, NotImplementedError, AttributeError):
        pass


def _forward(engine: HFEngine, input_ids: torch.Tensor, attention_mask: torch.Tensor,
             positions: torch.Tensor, cache: DynamicCache) -> torch.Tensor:
    """Run the model on new tokens; returns fp32 logits of the last position, [b, vocab]."""
    out = engine.model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=positions,
        use_cache=True,
        logits_to_keep=1,
        **{engine.cache_kwarg: cache},
    )
    return out.logits[:, -1].float()


def _check_params(params: SamplingParams) -> None:
    if params.temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {params.top_p}")
    if params.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {params.max_new_tokens}")


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[b, L] ids and attention mask (1 = real token), prompts aligned to the right."""
    width = max(len(p) for p in prompts)
    ids = np.full((len(prompts), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(prompts), width), dtype=np.int64)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = prompt
        mask[row, width - len(prompt) :] = 1
    return torch.from_numpy(ids), torch.from_numpy(mask)


def _sample(
    logits: torch.Tensor, params: SamplingParams, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick one id per row from fp32 logits [b, V]; returns (ids [b], logprobs [b]).

    The logprob is read from the temperature-scaled distribution before top-p (module docstring).
    Sampling inverts the CDF with one uniform per row from `generator`: a cumsum and a binary
    search, about 20x cheaper on CPU than `multinomial` or an exponential race over [b, V].
    """
    if params.temperature == 0:
        logp = torch.log_softmax(logits, dim=-1)
        token = logp.argmax(dim=-1)
    else:
        logp = torch.log_softmax(logits / params.temperature, dim=-1)
        nucleus = _top_p_filter(logp, params.top_p) if params.top_p < 1 else logp
        token = _sample_inverse_cdf(nucleus.exp(), generator)
    return token, logp.gather(1, token[:, None]).squeeze(1)


def _sample_inverse_cdf(probs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """One id per row of unnormalised probs [b, V]; an id of probability 0 is never returned.

    `searchsorted(right=True)` returns the first id whose CDF exceeds u, which skips ids that add
    no mass; u is kept strictly below the total so that such an id always exists.
    """
    cdf = probs.cumsum(dim=-1)
    total = cdf[:, -1:]
    u = torch.rand(total.shape, generator=generator, dtype=cdf.dtype) * total
    u = torch.minimum(u, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf, u, right=True).squeeze(1)


def _top_p_filter(logp: torch.Tensor, top_p: float) -> torch.Tensor:
    """Set to -inf every id outside the smallest set whose probability reaches top_p.

    The most likely id is always kept, so a tiny top_p is greedy (ties: the lowest id, as argmax).
    """
    sorted_logp, order = torch.sort(logp, dim=-1, descending=True, stable=True)
    probs = sorted_logp.exp()
    outside = (probs.cumsum(dim=-1) - probs) > top_p  # mass before this id already reaches top_p
    sorted_logp = sorted_logp.masked_fill(outside, float("-inf"))
    return torch.empty_like(logp).scatter_(1, order, sorted_logp)


def _to_generations(
    tokens: torch.Tensor, logprobs: torch.Tensor, lengths: torch.Tensor, finished: torch.Tensor
) -> list[Generation]:
    """Slice each row to its length; `finished` marks rows that ended on a stop id."""
    ids, lps = tokens.numpy().astype(np.int32), logprobs.numpy()
    return [
        Generation(token_ids=ids[row, :n].copy(), sampler_logprobs=lps[row, :n].copy(),
                   finished=done)
        for row, (n, done) in enumerate(zip(lengths.tolist(), finished.tolist(), strict=True))
    ]
