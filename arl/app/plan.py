"""`arl plan CONFIG`: where a run's memory goes, before it runs.

Estimates (bytes; P parameters, L layers, h hidden size, a heads, V vocabulary, T the longest
sequence an episode reaches, b micro-batch size):
  learner   fp32 weights 4P, gradients 4P, AdamW moments 8P (with LoRA: 4A and 8A for
            the A = rank * sum(in + out) adapter parameters, which the weights also
            gain); activations of one micro-batch b*T*L*(144h + aT); logits b*T*V*4*3
            (logits, log-softmax and their gradient); the exported weights for sync 4P.
            With learner.resources.backend=deepspeed and M learners, a rank holds 1/M of the AdamW
            moments (ZeRO stage >= 1), of the gradients (>= 2) and of the weights (3).
            The activation coefficients were fitted to the peak memory of a
            forward+backward of the tiny model in fp32 with SDPA attention on CPU
            (`bench/plan_memory.py`: within 5 % at T = 133, up to 30 % over at T = 512);
            they are those of this implementation, not a textbook's
  rollout   per worker: weights in model.dtype, and the KV cache of one decoding batch,
            n*T*2*L*kv_heads*head_dim*dtype bytes with n = min(batch / workers, 64): the HF
            engine decodes its share 64 sequences at a time; with
            engine=vllm, the pool vLLM reserves: gpu_memory_utilization of the GPU, or
            its weights plus rollout.vllm.gpu_kv_cache_gib where that is set (the plan
            prints the largest that fits), or on a CPU the weights plus
            rollout.vllm.kv_cache_gib
  object    Ray's object store: one published weight version (4P) and one step's trajectories
  store     (about 9 bytes a token: ids, loss mask, sampler log-probs)
  runtime   about 0.4 GiB per Python process (torch and transformers loaded) plus 0.5 GiB
            for Ray's own daemons

Pools: on a CPU machine everything is host memory. With a GPU, the model's tensors (learner
and rollout) are planned on the GPU and the rest on the host. With unified memory (a DGX
Spark: CPU and GPU share 128 GB) everything is summed against the one pool.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass

from arl.config import Config
from arl.dtypes import BYTES as DTYPE_BYTES
from arl.dtypes import resolve as resolve_dtype
from arl.errors import UserError

GIB = 2**30
PROCESS_BYTES = int(0.4 * GIB)
RAY_DAEMON_BYTES = int(0.5 * GIB)
TOOL_REPLY_TOKENS = 64  # a tool result plus the next turn's header, per extra turn
TRAJECTORY_BYTES_PER_TOKEN = 9  # int32 id, int8 loss mask, float32 sampler log-prob
HEADROOM = 0.9  # warn above this share of a pool
KV_ITEM = "rollout vLLM KV cache x{workers}"


@dataclass(frozen=True)
class ModelShape:
    """What the estimates need to know about a model."""

    params: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    lora_dims: int = 0  # sum of in + out features of the LoRA target layers (x rank = adapter)


@dataclass(frozen=True)
class Machine:
    """Memory pools in bytes. gpu None: no GPU. unified: host and GPU are one pool (`host`)."""

    host: int
    gpu: int | None = None
    unified: bool = False


@dataclass(frozen=True)
class Item:
    name: str
    where: str  # model (learner and rollout tensors) | host
    bytes: int
    knob: str  # the config key that shrinks it


def sequence_tokens(cfg: Config, prompt_tokens: int) -> int:
    """The longest sequence an episode can reach (T)."""
    turns = cfg.rollout.max_turns
    return prompt_tokens + turns * cfg.rollout.max_new_tokens + (turns - 1) * TOOL_REPLY_TOKENS


def activation_bytes(shape: ModelShape, b: int, t: int) -> int:
    """Activations kept for the backward pass of one fp32 micro-batch of b x t tokens."""
    return b * t * shape.layers * (144 * shape.hidden + shape.heads * t)


def logits_bytes(shape: ModelShape, b: int, t: int) -> int:
    """fp32 logits, their log-softmax and its gradient for b x t tokens."""
    return b * t * shape.vocab * 4 * 3


def items(cfg: Config, shape: ModelShape, prompt_tokens: int,
          machine: Machine | None = None) -> list[Item]:
    """Every memory item of the run (see the module docstring for the formulas)."""
    P, s = shape.params, shape
    # With LoRA only the adapters have gradients and AdamW moments (arl/model/lora.py).
    trained = cfg.learner.lora.rank * s.lora_dims if cfg.learner.lora.rank else P
    what = "lora" if cfg.learner.lora.rank else "full"
    T = sequence_tokens(cfg, prompt_tokens)
    b = cfg.learner.compute.micro_batch_size
    batch = cfg.rollout.groups_per_step * cfg.rollout.group_size
    workers = cfg.rollout.num_workers
    from arl.rollout.engines.hf import MAX_BATCH_SIZE  # what the HF engine decodes at once

    per_worker = min(-(-batch // workers), MAX_BATCH_SIZE)
    dtype = DTYPE_BYTES[resolve_dtype(cfg.model.dtype, on_gpu=cfg.rollout.gpus_per_worker > 0)]
    kv = per_worker * T * 2 * s.layers * s.kv_heads * s.head_dim * dtype
    micro = "learner.compute.micro_batch_size"
    shares = "rollout.groups_per_step, rollout.group_size or rollout.max_new_tokens"
    # DeepSpeed ZeRO: each learner rank holds 1/M of the moments (stage 1), the gradients
    # too (2) and the weights too (3); these items are per rank.
    zero = cfg.learner.resources.zero_stage if cfg.learner.resources.backend == "deepspeed" else 0
    m = cfg.learner.resources.num_workers

    def rank_part(nbytes: int, stage: int, label: str) -> tuple[int, str]:
        if zero >= stage and m > 1:
            return nbytes // m, f"{label}, ZeRO-{zero} 1/{m}"
        return nbytes, label

    weights = rank_part(4 * (P + trained * (what == "lora")), 3, "fp32")
    grads = rank_part(4 * trained, 2, f"fp32, {what}")
    moments = rank_part(8 * trained, 1, f"fp32, {what}")
    return [
        Item(f"learner weights ({weights[1]})", "model", weights[0],
             "model.path (a smaller model)"),
        Item(f"learner gradients ({grads[1]})", "model", grads[0],
             "learner.lora.rank (LoRA trains adapters only)"),
        Item(f"learner AdamW moments ({moments[1]})", "model", moments[0],
             "learner.lora.rank (LoRA trains adapters only), or "
             "learner.resources.backend=deepspeed with more learner.resources.num_workers"),
        *_reference_items(cfg, P, what),
        Item("learner activations", "model", activation_bytes(shape, b, T), micro),
        Item("learner logits", "model", logits_bytes(shape, b, T), micro),
        Item("learner exported weights", "host", 4 * P, "model.path (a smaller model)"),
        *_rollout_items(cfg, workers, dtype * P, kv, machine),
        Item("object store", "host", 4 * P + batch * T * TRAJECTORY_BYTES_PER_TOKEN, shares),
        Item("runtime", "host", (2 + workers) * PROCESS_BYTES + RAY_DAEMON_BYTES,
             "rollout.num_workers"),
    ]


def _reference_items(cfg: Config, params: int, what: str) -> list[Item]:
    """The KL penalty's reference policy: a frozen fp32 copy of the model on each learner
    rank, unless LoRA lends it the trained model with adapters off."""
    if cfg.learner.loss.kl_coef <= 0 or what == "lora":
        return []
    return [Item("learner reference model (fp32, frozen)", "model", 4 * params,
                 "learner.lora.rank (the reference is then the model with adapters off), "
                 "or learner.loss.kl_coef=0")]


def _rollout_items(cfg: Config, workers: int, weights: int, kv: int,
                   machine: Machine | None) -> list[Item]:
    """The HF engine: its weights and the KV cache of its share. vLLM reserves a fixed pool
    instead: gpu_memory_utilization of the GPU (weights, KV cache and activations), or on a
    CPU its weights plus rollout.vllm.kv_cache_gib."""
    v = cfg.rollout.vllm
    if cfg.rollout.engine == "vllm" and machine is not None and (machine.gpu or machine.unified):
        if v.gpu_kv_cache_gib > 0:  # a size in bytes: weights and that cache
            return [Item(f"rollout weights x{workers}", "model", workers * weights,
                         "model.dtype=bfloat16 or fewer rollout.num_workers"),
                    Item(KV_ITEM.format(workers=workers), "model",
                         int(workers * v.gpu_kv_cache_gib * GIB),
                         "rollout.vllm.gpu_kv_cache_gib")]
        gpu = machine.host if machine.unified else machine.gpu or 0
        return [Item(f"rollout vLLM reservation x{workers}", "model",
                     int(workers * v.gpu_memory_utilization * gpu),
                     "rollout.vllm.gpu_memory_utilization")]
    if cfg.rollout.engine == "vllm":
        return [Item(f"rollout weights x{workers}", "model", workers * weights,
                     "model.dtype=bfloat16 or fewer rollout.num_workers"),
                Item(f"rollout vLLM KV cache x{workers}", "model",
                     int(workers * v.kv_cache_gib * GIB), "rollout.vllm.kv_cache_gib")]
    return [Item(f"rollout weights x{workers}", "model", workers * weights,
                 "model.dtype=bfloat16 or fewer rollout.num_workers"),
            Item(f"rollout KV cache x{workers}", "model", workers * kv,
                 "rollout.groups_per_step, rollout.group_size or rollout.max_new_tokens")]


def largest_gpu_kv_cache(cfg: Config, shape: ModelShape, machine: Machine,
                         prompt_tokens: int) -> int | None:
    """Bytes of vLLM KV cache per rollout worker that keep the pool holding the model's
    tensors within HEADROOM of its capacity, everything else planned as configured (vLLM on a
    GPU or unified memory; else None). Sizing the cache in bytes from this plan, rather than
    as a share of a total vLLM reads at start-up, keeps it right when a learner shares the
    GPU or the memory is unified (a GB10 reports about 121.7 GiB of its 128 GB). vLLM's
    activations and CUDA graphs come out of the headroom."""
    if cfg.rollout.engine != "vllm" or not (machine.gpu or machine.unified):
        return None
    sized = copy.deepcopy(cfg)
    sized.rollout.vllm.gpu_kv_cache_gib = 1.0  # any size: the KV item is taken out below
    plan_items = items(sized, shape, prompt_tokens, machine)
    kv = next(i for i in plan_items if i.knob == "rollout.vllm.gpu_kv_cache_gib")
    pool = pool_of(machine, kv)
    used, capacity = pools(machine, plan_items)[pool]
    free = int(capacity * HEADROOM) - (used - kv.bytes)
    return max(free, 0) // cfg.rollout.num_workers


def pools(machine: Machine, plan_items: list[Item]) -> dict[str, tuple[int, int]]:
    """pool name -> (bytes planned, capacity)."""
    if machine.unified or machine.gpu is None:
        name = "unified" if machine.unified else "host"
        return {name: (sum(i.bytes for i in plan_items), machine.host)}
    gpu = sum(i.bytes for i in plan_items if i.where == "model")
    host = sum(i.bytes for i in plan_items if i.where == "host")
    return {"gpu": (gpu, machine.gpu), "host": (host, machine.host)}


def pool_of(machine: Machine, item: Item) -> str:
    if machine.unified:
        return "unified"
    return "gpu" if machine.gpu is not None and item.where == "model" else "host"


def report(cfg: Config, shape: ModelShape, machine: Machine, prompt_tokens: int
           ) -> tuple[list[str], dict, bool]:
    """(lines for people, the JSON summary, fits) of the plan."""
    plan_items = items(cfg, shape, prompt_tokens, machine)
    planned = pools(machine, plan_items)
    lines = [f"model: {shape.params / 1e6:.1f}M parameters, {shape.layers} layers, "
             f"hidden {shape.hidden}, vocab {shape.vocab}; longest sequence "
             f"{sequence_tokens(cfg, prompt_tokens)} tokens", ""]
    for item in plan_items:
        lines.append(f"  {item.name:<48} {item.bytes / GIB:9.3f} GiB  ({pool_of(machine, item)})")
    lines.append("")
    fits = True
    for name, (used, capacity) in planned.items():
        share = used / capacity if capacity else float("inf")
        lines.append(f"  {name} pool: {used / GIB:.2f} of {capacity / GIB:.1f} GiB ({share:.0%})")
        if share > HEADROOM:
            fits = fits and share <= 1.0
            biggest = max((i for i in plan_items if pool_of(machine, i) == name),
                          key=lambda i: i.bytes)
            verdict = "does not fit" if share > 1.0 else "is nearly full"
            lines.append(f"  WARNING: the {name} pool {verdict}; the largest item is "
                         f"{biggest.name}: turn {biggest.knob}")
    kv = largest_gpu_kv_cache(cfg, shape, machine, prompt_tokens)
    if kv is not None:
        lines.append(f"  the largest vLLM KV cache that fits: rollout.vllm.gpu_kv_cache_gib="
                     f"{kv / GIB:.1f} (per rollout worker)")
    summary = {
        "fits": fits,
        "largest_gpu_kv_cache_gib": None if kv is None else round(kv / GIB, 2),
        "params": shape.params,
        "sequence_tokens": sequence_tokens(cfg, prompt_tokens),
        "items_gib": {i.name: round(i.bytes / GIB, 4) for i in plan_items},
        "pools_gib": {n: {"planned": round(u / GIB, 3), "capacity": round(c / GIB, 3)}
                      for n, (u, c) in planned.items()},
    }
    return lines, summary, fits


def model_shape(path: str, lora_targets: list[str] | tuple[str, ...] = ()) -> ModelShape:
    """Read a local HF model folder's config; count parameters exactly on the meta device
    (no weights are loaded or allocated), and the LoRA dimensions of `lora_targets`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(path, local_files_only=True)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    heads = text.num_attention_heads
    return ModelShape(
        params=sum(p.numel() for p in model.parameters()),
        layers=text.num_hidden_layers,
        hidden=text.hidden_size,
        heads=heads,
        kv_heads=getattr(text, "num_key_value_heads", None) or heads,
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // heads,
        vocab=text.vocab_size,
        lora_dims=sum(m.in_features + m.out_features for name, m in model.named_modules()
                      if isinstance(m, torch.nn.Linear)
                      and name.rsplit(".", 1)[-1] in set(lora_targets)),
    )


def prompt_tokens(cfg: Config, samples: int = 32) -> int:
    """The longest first prompt the configured env gives, rendered with the model's chat
    template (the tool line included)."""
    from transformers import AutoTokenizer

    from arl.env_spec import EnvContext, resolve_env
    from arl.episode import ChatRenderer

    try:
        tokenizer = AutoTokenizer.from_pretrained(cfg.model.path, local_files_only=True)
    except (OSError, ValueError, TypeError) as err:
        raise UserError(f"{cfg.model.path} has no usable tokenizer ({type(err).__name__}), so "
                        "the prompts cannot be measured: pass --prompt-tokens N (the longest "
                        "prompt in tokens)") from None
    if tokenizer.chat_template is None:
        raise UserError(f"{cfg.model.path}: the tokenizer has no chat template; pass "
                        "--prompt-tokens N")
    renderer = ChatRenderer(tokenizer, stop_token=tokenizer.eos_token)
    spec = resolve_env(cfg.env.name)
    self_play = spec.self_play(cfg.env) if spec.self_play is not None else None
    # a snapshot opponent only moves: a random chooser gives the same prompts
    opponent = None if self_play is None else self_play.opponent(
        lambda prompt, calls, rng: rng.randrange(len(calls)))
    env = spec.make(cfg.env, EnvContext(opponent=opponent))
    return max(len(renderer.prompt_ids(env.reset(seed))) for seed in range(samples))


def as_json(summary: dict) -> str:
    return json.dumps(summary, sort_keys=True)


def run_plan(cfg: Config, args) -> int:
    """`arl plan`: the plan's table, then its JSON line; exit 1 if it does not fit."""
    from arl.model.source import local_folder

    cfg.model.path = local_folder(cfg.model.path)
    shape = model_shape(cfg.model.path, cfg.learner.lora.target_modules)
    prompt = args.prompt_tokens if args.prompt_tokens else prompt_tokens(cfg)
    lines, summary, fits = report(cfg, shape, _machine(args), prompt)
    print("\n".join(lines))
    print(as_json(summary))
    return 0 if fits else 1


def _machine(args) -> Machine:
    """The memory pools `arl plan` plans against: the flags, else this machine."""
    from arl.app.doctor import total_memory_gib

    if args.unified_memory_gb is not None:
        return Machine(int(args.unified_memory_gb * GIB), None, unified=True)
    host = args.memory_gb if args.memory_gb is not None else total_memory_gib()
    gpu = args.gpu_memory_gb
    if gpu is None:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_properties(0).total_memory / GIB
    return Machine(int(host * GIB), None if gpu is None else int(gpu * GIB))
