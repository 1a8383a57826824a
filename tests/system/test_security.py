"""Security rules that hold for the whole project: model output and files are data, never
code; secrets stay out of everything the run writes; the lint gate (ruff, with its bandit
rules) is clean."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
FOLDERS = ("arl", "bench", "tests", "examples")
# Anything that runs text as code or unpickles bytes.
FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__", "os.system", "os.popen",
                   "yaml.load", "yaml.unsafe_load", "yaml.full_load", "torch.load",
                   "pickle.load", "pickle.loads", "marshal.loads", "np.load", "numpy.load"}
FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve"}


def _sources() -> list[pathlib.Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _offences(path: pathlib.Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in FORBIDDEN_CALLS:
                found.append(f"{where} calls {name}")
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                              and kw.value.value is False):
                    found.append(f"{where} passes shell=")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [
                node.module or ""]
            found += [f"{where} imports {n}" for n in names
                      if n.split(".")[0] in FORBIDDEN_MODULES]
    return found


def test_no_code_execution_or_unpickling_anywhere():
    sources = _sources()
    assert len(sources) > 50
    offences = [o for path in sources for o in _offences(path)]
    assert not offences, "\n".join(offences)


def test_the_scanner_catches_what_it_forbids(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import pickle\nimport yaml\nyaml.load(s)\neval(x)\n"
                   "subprocess.run(c, shell=True)\ntorch.load(f)\nyaml.safe_load(s)\n")
    found = _offences(bad)
    assert [o.rsplit(":", 1)[1].split()[0] for o in found] == ["1", "3", "4", "5", "6"], found


def test_ruff_is_clean():
    """The lint gate: pycodestyle, pyflakes, import order, bugbear and bandit (S) rules."""
    ruff = pathlib.Path(sys.executable).parent / "ruff"
    out = subprocess.run([str(ruff), "check", "--no-cache", "."], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_secrets_never_reach_the_run_files_or_the_ray_logs(tmp_path, warm_model_dir,
                                                           monkeypatch):
    import ray

    from arl.app.train import train
    from arl.config import load_config

    canary = "arl-canary-secret-0123456789abcdef0123456789"
    monkeypatch.setenv("WANDB_API_KEY", canary)
    session: list[str] = []
    real_shutdown = ray.shutdown

    def shutdown(*args, **kwargs):  # note the session folder before it is forgotten
        if ray.is_initialized():
            session.append(ray._private.worker._global_node.get_session_dir_path())
        real_shutdown(*args, **kwargs)

    monkeypatch.setattr(ray, "shutdown", shutdown)
    cfg = load_config(["configs/ci.yaml"], [f"model.path={warm_model_dir}",
                                            f"output_dir={tmp_path}", "steps=2",
                                            "wandb.mode=offline", "ray.address=local"])
    train(cfg)
    assert session and os.path.isdir(session[0])
    leaks = []
    for folder in (tmp_path, pathlib.Path(session[0])):
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                if canary.encode() in path.read_bytes():
                    leaks.append(str(path))
    assert not leaks, leaks


@pytest.mark.parametrize("honour_gitignore", [True, False])
def test_a_jobs_upload_never_carries_secrets_or_runs(tmp_path, honour_gitignore):
    """`ray job submit --working-dir .` zips the working directory with Ray's own packager:
    .env (API keys), key files and runs stay behind, also where Ray is told to ignore
    .gitignore (RAY_RUNTIME_ENV_IGNORE_GITIGNORE=1): .rayignore says so too."""
    import shutil
    import zipfile

    from ray._private.runtime_env.packaging import create_package

    work = tmp_path / "work"
    (work / "runs" / "ci").mkdir(parents=True)
    for name in (".gitignore", ".rayignore"):
        shutil.copy(ROOT / name, work / name)
    (work / ".env").write_text("WANDB_API_KEY=secret\n")
    (work / ".env.local").write_text("HF_TOKEN=secret\n")
    (work / "id.pem").write_text("-----BEGIN PRIVATE KEY-----\n")
    (work / "runs" / "ci" / "metrics.jsonl").write_text("{}\n")
    (work / "configs.yaml").write_text("steps: 1\n")
    target = tmp_path / "package.zip"
    create_package(str(work), target, include_gitignore=honour_gitignore)
    names = zipfile.ZipFile(target).namelist()
    assert any(n.endswith("configs.yaml") for n in names), names
    leaked = [n for n in names if ".env" in n or n.endswith(".pem") or "runs/" in n]
    assert not leaked, leaked
