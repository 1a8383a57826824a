"""The package shape of DESIGN.md §2: who may import what, and what `import arl` pulls in."""

import ast
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("arl", "actors", "learner", "envs")
HEAVY = ("ray", "vllm", "deepspeed", "wandb")
# Composition roots: the only core modules allowed to wire every package together.
ROOTS = {"arl/train.py", "arl/cli.py", "arl/warmstart.py", "arl/doctor.py", "arl/plan.py"}
ALLOWED = {
    "arl": {"arl"},
    "envs": {"arl", "envs"},
    "learner": {"arl", "learner"},
    "actors": {"arl", "learner", "envs", "actors"},
}


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _sources(package: str) -> list[pathlib.Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_dependency_rule():
    violations = []
    for package in PACKAGES:
        for path in _sources(package):
            rel = str(path.relative_to(ROOT))
            if rel in ROOTS:
                continue
            project = _imports(path) & set(PACKAGES)
            for name in sorted(project - ALLOWED[package]):
                violations.append(f"{rel} imports {name}")
    assert not violations, "dependency rule broken:\n" + "\n".join(violations)


def test_ray_only_in_actors():
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("arl", "learner", "envs")
        for path in _sources(package)
        if str(path.relative_to(ROOT)) not in ROOTS and "ray" in _imports(path)
    ]
    assert not offenders, f"ray imported outside actors/: {offenders}"


def test_envs_import_no_torch():
    offenders = [
        str(p.relative_to(ROOT)) for p in _sources("envs") if {"torch", "ray"} & _imports(p)
    ]
    assert not offenders


def test_import_arl_pulls_no_heavy_module():
    modules = [p.stem for p in _sources("arl") if p.stem != "__init__"]
    code = (
        "import importlib, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module('arl.' + m)\n"
        f"print([m for m in {HEAVY!r} if m in sys.modules])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_no_source_file_over_400_lines():
    long = [
        f"{p.relative_to(ROOT)}: {n}"
        for package in PACKAGES
        for p in _sources(package)
        if (n := len(p.read_text().splitlines())) > 400
    ]
    assert not long, long
