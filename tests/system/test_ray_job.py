"""The Ray cluster commands of the README and the scale-out page, run verbatim: `ray start`
a real head node (and a second node), `ray job submit -- arl train CONFIG` with no path
overrides, then the run directory the job's log names, and `arl eval` on its latest
checkpoint.

The command lines are read out of README.md and docs/scale-out.md, so neither can drift
from what is tested. The environment only isolates the test: ARL_HOME (where `arl
warmstart` put the model, a copy of the test's warm model here) and RAY_TMPDIR (the
cluster's temp dir, so the test stops only its own processes).
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BIN = pathlib.Path(sys.executable).parent
README = (ROOT / "README.md").read_text()
SCALE_OUT = (ROOT / "docs" / "scale-out.md").read_text()  # the two-node block lives there
RUN_DIR_LINE = re.compile(r"arl train: run directory (\S+)")


def readme_block(marker: str) -> list[str]:
    """The command lines of the README's ```bash block that contains `marker`, with their
    trailing comments removed."""
    for block in re.findall(r"```bash\n(.*?)```", README + SCALE_OUT, re.S):
        if marker in block:
            lines = [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines()]
            return [line for line in lines if line]
    raise AssertionError(f"README.md and docs/scale-out.md have no bash block with {marker!r}")


def _sh(line: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", line], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture
def cluster_env(tmp_path, warm_model_dir):
    """The environment of a person who ran `make demo` (the warm model in ARL_HOME), with
    the cluster's temp dir of its own; afterwards, every process of that cluster is gone."""
    home = tmp_path / "arl-home"
    shutil.copytree(warm_model_dir, home / "models" / "tiny-warmstart-board")
    ray_tmp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Ray's socket paths stay short
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "ARL_HOME": str(home),
           "RAY_TMPDIR": ray_tmp}
    for name in ("RAY_ADDRESS", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"):
        env.pop(name, None)  # set by an embedded cluster earlier in this process
    try:
        yield env
    finally:
        _stop_cluster(ray_tmp)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _run_block(marker: str, env: dict) -> str:
    """Run every line of the README block (a fresh head's job agent may need a while on a
    busy machine: "No available agent" is retried for up to 5 minutes); return the job's
    logs."""
    logs = ""
    for line in readme_block(marker):
        if line.startswith("ray stop"):
            continue  # the fixture stops only this test's cluster
        deadline = time.monotonic() + 300
        while True:
            out = _sh(line, env)
            text = out.stdout + out.stderr
            if "No available agent" not in text or time.monotonic() > deadline:
                break
            time.sleep(3)
        assert out.returncode == 0, f"{line}\n{text[-4000:]}"
        if "ray job submit" in line:
            logs = text
    return logs


def _run_dir(logs: str) -> pathlib.Path:
    found = RUN_DIR_LINE.search(logs)
    assert found, logs[-4000:]
    return pathlib.Path(found.group(1))


def test_job_submit_on_a_head_node_as_the_readme_says(cluster_env, tmp_path):
    logs = _run_block("arl train configs/ci.yaml", cluster_env)
    assert "succeeded" in logs and "done: 3 steps" in logs, logs[-4000:]
    run_dir = _run_dir(logs)
    assert run_dir == pathlib.Path(cluster_env["ARL_HOME"]) / "runs" / "ci"
    assert (run_dir / "metrics.jsonl").read_text().count("\n") == 3
    positions = tmp_path / "p.jsonl"
    positions.write_text('{"board": "XX.OO....", "to_move": "X", "good_moves": [3]}\n')
    out = subprocess.run(
        [str(BIN / "arl"), "eval", "--checkpoint", str(run_dir / "checkpoints" / "latest"),
         "--positions", str(positions), "--max-new-tokens", "24"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, env=cluster_env)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.splitlines()[-1])["positions"] == 1


@pytest.mark.slow
def test_two_node_config_places_actors_on_their_nodes(cluster_env):
    """The README's two-node block: 5 steps, the rollout worker on the node offering
    `rollout_node`, the learner on the one offering `learner_node` (Ray's state API)."""
    logs = _run_block("configs/two_node_cpu.yaml", cluster_env)
    assert "done: 5 steps" in logs, logs[-4000:]
    assert (_run_dir(logs) / "metrics.jsonl").read_text().count("\n") == 5
    node_of = {}
    for node in _ray_list(cluster_env, "nodes"):
        for name in ("learner_node", "rollout_node"):
            if name in (node.get("resources_total") or {}):
                node_of[name] = node["node_id"]
    assert set(node_of) == {"learner_node", "rollout_node"}
    assert node_of["learner_node"] != node_of["rollout_node"]
    actors = _ray_list(cluster_env, "actors")
    placed = {a["class_name"]: a["node_id"] for a in actors
              if a["class_name"] in ("RolloutActor", "LearnerActor")}
    assert placed == {"RolloutActor": node_of["rollout_node"],
                      "LearnerActor": node_of["learner_node"]}, actors


def _ray_list(env: dict, what: str) -> list[dict]:
    # As the README's own `ray list`: the CLI sends the cluster's token (~/.ray/auth_token)
    # only in token mode, which a head may require whatever the client's environment says.
    out = _sh(f"RAY_AUTH_MODE=token ray list {what} --detail --format json --limit 1000", env,
              timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def _proc_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, command line) of every live process."""
    table = {}
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                stat = (entry / "stat").read_text()
                state, ppid = stat[stat.rindex(")") + 2:].split()[:2]
                table[int(entry.name)] = (int(ppid), state, (entry / "cmdline").read_text())
        except (OSError, ValueError):  # the process ended meanwhile
            continue
    return table


def _processes_of(marker: str) -> set[int]:
    """Live (not zombie) processes whose command line or environment names `marker` (the
    cluster's temp dir), and their descendants (Ray renames some children)."""
    table = _proc_table()
    found = set()
    for pid, (_, _, cmd) in table.items():
        try:
            env = pathlib.Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
        except OSError:
            env = ""
        if marker in cmd or marker in env:
            found.add(pid)
    grew = True
    while grew:
        children = {pid for pid, (ppid, _, _) in table.items() if ppid in found} - found
        found |= children
        grew = bool(children)
    return {pid for pid in found if pid != os.getpid() and table[pid][1] != "Z"}


def _stop_cluster(ray_tmp: str) -> None:
    """Stop only this test's cluster (`ray stop` would stop every Ray process of the user):
    SIGTERM, then SIGKILL after 10 s."""
    pids = _processes_of(ray_tmp)  # once: killed parents would orphan their children
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while _alive(pids) and time.monotonic() < deadline:
            time.sleep(0.2)
    assert not _alive(pids), "processes of the test's Ray cluster survived"


def _alive(pids: set[int]) -> set[int]:
    table = _proc_table()
    return {pid for pid in pids if pid in table and table[pid][1] != "Z"}
