"""Files from elsewhere are data, and arl's own writes touch only what arl made: each attack a
security review found, reproduced with the real `arl` command, and shown to fail.

- a downloaded checkpoint that names code (its env, an agent, an opponent) runs none of it;
- a file a checkpoint holds but does not list, or one behind a symbolic link, is never read
  or exported;
- the warm start and a new run never delete or move a folder arl did not make;
- two runs on one run directory: the second exits 2 naming the first; a dead run's lock is
  taken over.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from arl.app.run_lock import RunDirBusy, RunLock, lock_path
from tests.builders import CI, arl_cli, learner_checkpoint, one_line_exit_2

ROOT = Path(__file__).resolve().parents[2]
ZEN = "Beautiful is better than ugly"  # what `import this` prints


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, warm_model_dir) -> Path:
    """A real checkpoint, with the env section a tic-tac-toe run records."""
    path = tmp_path_factory.mktemp("ckpt") / "checkpoints" / "step_000001"
    learner_checkpoint(warm_model_dir, path)
    _forge(path, "learner.json", lambda learner: learner["extra"]["config"].update(
        env={"name": "tictactoe", "opponent": "random", "board_format": "lists"}))
    return path


def _copy(checkpoint: Path, tmp_path: Path) -> Path:
    import shutil

    target = tmp_path / "downloaded" / "step_000001"
    shutil.copytree(checkpoint, target)
    return target


def _forge(checkpoint: Path, name: str, edit) -> None:
    """Change a JSON file of a checkpoint as its author could, and list its new size and
    sha256 in the manifest, so that every hash checks."""
    path = checkpoint / name
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    _relist(checkpoint, name)


def _relist(checkpoint: Path, name: str) -> None:
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    raw = (checkpoint / name).read_bytes()
    manifest["files"][name] = {"sha256": hashlib.sha256(raw).hexdigest(), "bytes": len(raw)}
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))


def _env_of(checkpoint: Path, env: dict) -> None:
    _forge(checkpoint, "learner.json",
           lambda learner: learner["extra"]["config"].update(env=env))


@pytest.mark.parametrize("env", [
    {"name": "tests.system.hostile_code:make"},
    {"name": "this:s"},
    {"name": "tictactoe", "agent": "tests.system.hostile_code:run_agent"},
    {"name": "tictactoe", "opponent_pool": ["random", "tests.system.hostile_code:make"]},
], ids=["env-name", "zen", "agent", "nested"])
def test_a_checkpoint_never_imports_the_code_it_names(checkpoint, tmp_path, env):
    forged = _copy(checkpoint, tmp_path)
    _env_of(forged, env)
    marker = tmp_path / "imported"
    out = arl_cli("eval", "--checkpoint", str(forged), "--games", "2",
                  env={"ARL_TEST_MARKER": str(marker)}, timeout=300)
    one_line_exit_2(out, "names code to import", "--env")
    assert not marker.exists() and ZEN not in out.stdout + out.stderr
    # Named by the user instead, the env is theirs to choose: the games are played.
    out = arl_cli("eval", "--checkpoint", str(forged), "--games", "2", "--env", "tictactoe",
                  "env.opponent=random", env={"ARL_TEST_MARKER": str(marker)}, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1])["games"] == 2
    assert not marker.exists() and ZEN not in out.stdout + out.stderr


def test_a_checkpoints_env_that_is_not_installed_is_refused(checkpoint, tmp_path):
    forged = _copy(checkpoint, tmp_path)
    _env_of(forged, {"name": "no_such_env"})
    one_line_exit_2(arl_cli("eval", "--checkpoint", str(forged), "--games", "1"),
                    "no_such_env", "not installed")


def test_export_reads_only_the_files_its_manifest_lists(checkpoint, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("the user's private key\n")
    forged = _copy(checkpoint, tmp_path)
    (forged / "hf" / "notes.txt").symlink_to(secret)  # held, not listed
    (forged / "hf" / "extra.json").write_text('{"kept": false}')  # held, not listed
    out = arl_cli("export", str(forged), str(tmp_path / "out"), timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    exported = {p.name: p.read_bytes() for p in (tmp_path / "out").iterdir() if p.is_file()}
    assert "notes.txt" not in exported and "extra.json" not in exported
    assert not any(b"private key" in data for data in exported.values())
    assert "config.json" in exported and "model.safetensors" in exported


def test_a_listed_file_behind_a_link_is_refused(checkpoint, tmp_path):
    """A symbolic link with the very bytes the manifest lists is still not the checkpoint's
    own file: refused, and nothing is exported."""
    outside = tmp_path / "outside.json"
    forged = _copy(checkpoint, tmp_path)
    listed = forged / "hf" / "tokenizer_config.json"
    outside.write_bytes(listed.read_bytes())
    listed.unlink()
    listed.symlink_to(outside)
    one_line_exit_2(arl_cli("export", str(forged), str(tmp_path / "out"), timeout=300),
                    "symbolic link")
    assert not (tmp_path / "out").exists()


def test_a_checkpoint_whose_model_folder_is_a_link_is_refused(checkpoint, tmp_path):
    import shutil

    forged = _copy(checkpoint, tmp_path)
    shutil.move(forged / "hf", tmp_path / "elsewhere")
    (forged / "hf").symlink_to(tmp_path / "elsewhere")
    one_line_exit_2(arl_cli("export", str(forged), str(tmp_path / "out"), timeout=300),
                    "symbolic link")


def _sentinel_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    sentinel = path / "thesis.tex"
    sentinel.write_text("years of work\n")
    return sentinel


def test_the_warm_start_never_deletes_a_folder_it_did_not_make(tmp_path):
    sentinel = _sentinel_folder(tmp_path / "mine")
    out = arl_cli("warmstart", f"warmstart.output={tmp_path / 'mine'}", "warmstart.examples=64",
                  env={"ARL_HOME": str(tmp_path / "home")})
    one_line_exit_2(out, str(tmp_path / "mine"), "warmstart.output", "not a warmstart folder")
    assert sentinel.read_text() == "years of work\n"
    assert sorted(os.listdir(tmp_path / "mine")) == ["thesis.tex"]


def test_a_new_run_never_moves_a_folder_it_did_not_make(tmp_path, warm_model_dir):
    sentinel = _sentinel_folder(tmp_path / "mine")
    out = arl_cli("train", CI, f"model.path={warm_model_dir}", f"output_dir={tmp_path}",
                  "run_name=mine")
    one_line_exit_2(out, str(tmp_path / "mine"), "not a run folder")
    assert sentinel.read_text() == "years of work\n"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["mine"]


def test_a_second_run_on_the_same_directory_exits_2_naming_the_first(tmp_path,
                                                                     warm_model_dir):
    from tests.builders import subprocess_env, train_command

    first = subprocess.Popen(train_command(warm_model_dir, tmp_path, 1000, "wandb.mode=disabled"),
                             cwd=ROOT, env=subprocess_env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        _wait_for_lock(tmp_path / "ci", first)
        out = arl_cli("train", CI, f"model.path={warm_model_dir}", f"output_dir={tmp_path}",
                      "ray.address=local")
        one_line_exit_2(out, str(tmp_path / "ci"), f"pid {first.pid}", "in use")
    finally:
        first.send_signal(signal.SIGINT)  # Ctrl-C: it stops and shuts its cluster down
        first.wait(timeout=120)


def _wait_for_lock(run_dir: Path, holder: subprocess.Popen) -> None:
    lock = Path(lock_path(str(run_dir)))
    for _ in range(600):  # a run takes the lock before anything heavy
        if lock.is_file() and str(holder.pid) in lock.read_text():
            return
        assert holder.poll() is None, "the lock holder ended early"
        time.sleep(0.1)
    raise AssertionError("the lock was never taken")


HOLD = """
import sys, time
from arl.app.run_lock import RunLock
with RunLock(sys.argv[1]):
    time.sleep(3600)
"""


def test_the_lock_of_a_killed_run_is_taken_over(tmp_path):
    """A run killed outright (SIGKILL, an OOM kill) cannot unlock: the kernel does, and the
    next run takes the run directory."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path / "run")], cwd=ROOT,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        _wait_for_lock(tmp_path / "run", holder)
        with pytest.raises(RunDirBusy, match=f"pid {holder.pid}"):
            RunLock(str(tmp_path / "run")).__enter__()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=60)
    with RunLock(str(tmp_path / "run")) as held:
        assert json.loads(Path(held.path).read_text())["pid"] == os.getpid()


def test_a_lock_file_left_behind_is_taken_over(tmp_path):
    """A lock file that names a process which is gone (a crash, a reboot) holds no lock."""
    path = Path(lock_path(str(tmp_path / "run")))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    path.write_text(json.dumps({"pid": int(dead), "host": "elsewhere"}))
    with RunLock(str(tmp_path / "run")):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert path.read_text() == ""  # an unlocked lock file names nobody
