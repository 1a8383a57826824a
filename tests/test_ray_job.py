"""`ray job submit -- arl train configs/ci.yaml` against a real head node started for the test."""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
BIN = pathlib.Path(sys.executable).parent


def _run(*args, timeout=300, env=None):
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env)


@pytest.fixture
def head_node():
    # The cluster enables Ray's token authentication; the job client must send the token.
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "RAY_AUTH_MODE": "token"}
    env.pop("RAY_ADDRESS", None)
    port = "6391"
    # Ray's socket paths must stay under 107 bytes: a short temp dir, not pytest's.
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    started = _run(
        str(BIN / "ray"), "start", "--head", "--num-cpus", "2", "--port", port,
        "--dashboard-host", "127.0.0.1", "--node-ip-address", "127.0.0.1",
        "--temp-dir", temp_dir, "--disable-usage-stats",
        env=env,
    )
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        yield env
    finally:
        _stop_cluster(temp_dir, port)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _proc_table() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, command line) of every live process."""
    table = {}
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if entry.name.isdigit():
                stat = (entry / "stat").read_text()
                state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
                table[int(entry.name)] = (int(ppid), state, (entry / "cmdline").read_text())
        except (OSError, ValueError):  # the process ended meanwhile
            continue
    return table


def _processes_of(markers: tuple[str, ...]) -> set[int]:
    """Live (not zombie) processes of one cluster: those whose command line names one of
    `markers` (its temp dir, ":<gcs port>" for the daemonized client server), and their
    descendants (Ray renames some children, "ray::RuntimeEnvAgent")."""
    table = _proc_table()
    found = {pid for pid, (_, _, cmd) in table.items() if any(m in cmd for m in markers)}
    grew = True
    while grew:
        children = {pid for pid, (ppid, _, _) in table.items() if ppid in found} - found
        found |= children
        grew = bool(children)
    return {pid for pid in found if table[pid][1] != "Z"}


def _stop_cluster(temp_dir: str, port: str) -> None:
    """Stop only this test's cluster. (`ray stop` would kill every Ray process of the user,
    a training run next to the tests included.) SIGTERM, then SIGKILL after 10 s. Without
    /proc (not Linux) fall back to `ray stop`."""
    if not pathlib.Path("/proc/self/cmdline").exists():
        _run(str(BIN / "ray"), "stop", "--force")
        return
    pids = _processes_of((temp_dir, f":{port}"))  # once: killed parents would orphan their children
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


def _submit(env: dict, dashboard_port: int, *train_args: str) -> str:
    """`ray job submit --working-dir . -- arl train ARGS`; the job's logs, after asserting
    that the submission succeeded. A fresh head node's job agent can take a while to come up
    on a busy machine: "No available agent" is retried for up to 3 minutes."""
    deadline = time.monotonic() + 180
    while True:
        submitted = _run(
            str(BIN / "ray"), "job", "submit", "--address", f"http://127.0.0.1:{dashboard_port}",
            "--working-dir", ".", "--", "arl", "train", *train_args, env=env, timeout=600)
        logs = submitted.stdout + submitted.stderr
        if "No available agent to submit job" not in logs or time.monotonic() > deadline:
            break
        time.sleep(3)
    assert submitted.returncode == 0, logs[-4000:]
    return logs


def test_ray_job_submit_runs_training(head_node, warm_model_dir, tmp_path):
    assert shutil.which("ray", path=head_node["PATH"])
    out_dir = tmp_path / "runs"
    logs = _submit(head_node, 8265, "configs/ci.yaml", f"model.path={warm_model_dir}",
                   f"output_dir={out_dir}")
    assert "succeeded" in logs, logs[-4000:]
    assert "done: 3 steps" in logs, logs[-4000:]
    assert (out_dir / "ci" / "metrics.jsonl").read_text().count("\n") == 3


@pytest.fixture
def two_nodes():
    """A head node offering `learner_node` and a second node on this machine offering
    `rollout_node`, one CPU each."""
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "RAY_AUTH_MODE": "token"}
    env.pop("RAY_ADDRESS", None)
    # An embedded cluster started earlier in this process turned multi-node clusters off
    # for its children (actors/cluster.py keeps it on loopback); these nodes are separate.
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    port = "6393"
    temp_dir = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    common = ("--node-ip-address", "127.0.0.1", "--disable-usage-stats", "--num-cpus", "1")
    try:
        head = _run(str(BIN / "ray"), "start", "--head", "--port", port, "--temp-dir", temp_dir,
                    "--dashboard-host", "127.0.0.1", "--dashboard-port", "8267",
                    "--resources", '{"learner_node": 1}', *common, env=env)
        assert head.returncode == 0, head.stdout + head.stderr
        worker = _run(str(BIN / "ray"), "start", "--address", f"127.0.0.1:{port}",
                      "--resources", '{"rollout_node": 1}', *common, env=env)
        assert worker.returncode == 0, worker.stdout + worker.stderr
        yield env
    finally:
        _stop_cluster(temp_dir, port)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _ray_list(env, *what) -> list[dict]:
    import json

    out = _run(str(BIN / "ray"), "list", *what, "--format", "json", "--limit", "1000",
               "--address", "127.0.0.1:6393", env=env, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def test_two_node_config_places_actors_on_their_nodes(two_nodes, warm_model_dir, tmp_path):
    """`ray job submit -- arl train configs/two_node_cpu.yaml`: 5 steps, the rollout worker
    on the node offering `rollout_node`, the learner on the one offering `learner_node`
    (Ray's state API)."""
    out_dir = tmp_path / "runs"
    logs = _submit(two_nodes, 8267, "configs/two_node_cpu.yaml", f"model.path={warm_model_dir}",
                   f"output_dir={out_dir}")
    assert "done: 5 steps" in logs, logs[-4000:]
    assert (out_dir / "two_node_cpu" / "metrics.jsonl").read_text().count("\n") == 5
    nodes = _ray_list(two_nodes, "nodes", "--detail")
    node_of = {}
    for node in nodes:
        for name in ("learner_node", "rollout_node"):
            if name in (node.get("resources_total") or {}):
                node_of[name] = node["node_id"]
    assert set(node_of) == {"learner_node", "rollout_node"}
    assert node_of["learner_node"] != node_of["rollout_node"]
    actors = _ray_list(two_nodes, "actors", "--detail")
    placed = {a["class_name"]: a["node_id"] for a in actors
              if a["class_name"] in ("RolloutWorker", "LearnerWorker")}
    assert placed == {"RolloutWorker": node_of["rollout_node"],
                      "LearnerWorker": node_of["learner_node"]}, actors
