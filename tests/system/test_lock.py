"""The lock (lock/*.txt, tools/lock.py): in step with pyproject.toml, a stale or unmet lock is
named, and the virtualenv `make test` built holds exactly the lock's packages."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import pathlib
import platform
import shutil
import subprocess
import sys
import sysconfig

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
# What a virtualenv holds besides the lock: its installer, and arl itself (editable).
NOT_LOCKED = {"pip", "setuptools", "wheel", "arl"}


def _tool():
    spec = importlib.util.spec_from_file_location("arl_lock_tool", ROOT / "tools" / "lock.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_lock_is_in_step_with_pyproject():
    assert _tool().check() == []


def test_a_changed_requirement_or_a_hand_edited_pin_is_named(tmp_path, monkeypatch):
    tool = _tool()
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    shutil.copytree(ROOT / "lock", tmp_path / "lock")
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    monkeypatch.setattr(tool, "LOCK_DIR", tmp_path / "lock")
    assert tool.check() == []

    demo = tmp_path / "lock" / "cpu-x86_64-demo.txt"
    demo.write_text(demo.read_text().replace("\nomegaconf==", "\nomegaconf==1.0.0 #"))
    assert tool.check() == ["lock/cpu-x86_64-demo.txt: omegaconf>=2.3 is not met "
                            "(pinned: 1.0.0)"]

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"tqdm>=4.66"', '"tqdm>=4.67"'))
    stale = [p for p in tool.check() if "another pyproject.toml" in p]
    assert len(stale) == len(tool.LOCKS)

    done = subprocess.run([sys.executable, str(ROOT / "tools" / "lock.py"), "check"],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (0, "")


def test_the_demo_lock_agrees_with_the_dev_lock():
    tool = _tool()
    for arch in ("x86_64", "aarch64"):
        dev = tool.pins(ROOT / "lock" / f"cpu-{arch}-dev.txt")
        demo = tool.pins(ROOT / "lock" / f"cpu-{arch}-demo.txt")
        assert set(demo) <= set(dev)
        assert {n: v for n, v in demo.items() if dev[n] != v} == {}


@pytest.mark.skipif(not (pathlib.Path(sys.prefix) / ".installed").exists(),
                    reason="not the virtualenv `make test` builds")
def test_the_virtualenv_holds_exactly_the_lock():
    tool = _tool()
    locked = tool.pins(ROOT / "lock" / f"cpu-{platform.machine()}-dev.txt")
    locked |= tool.pins(ROOT / "lock" / "model-smollm2.txt")
    # the virtualenv's own packages (not the ones other packages vendor: setuptools puts
    # its _vendor folder on sys.path once imported)
    site = pathlib.Path(sysconfig.get_paths()["purelib"]).resolve()
    installed = {tool.canonical(d.metadata["Name"]): d.version
                 for d in importlib.metadata.distributions()
                 if pathlib.Path(d.locate_file("")).resolve() == site}
    extra = {n: v for n, v in installed.items() if n not in locked and n not in NOT_LOCKED}
    assert extra == {}, "installed but not in the lock"
    assert {n: (installed.get(n), v) for n, v in locked.items() if installed.get(n) != v} == {}
