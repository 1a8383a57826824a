"""The embedded Ray that `arl train` starts, and everything arl starts on it (a multi-rank
learner's rendezvous and gloo group, a weight-sync group), listen on the loopback address
only."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Runs in its own process so that no other test's Ray cluster is in the way.
SCRIPT = """
import json
import psutil
import ray
from arl.actors.connect import connect, shutdown
from arl.config import RayConfig

assert connect(RayConfig(address="local", num_cpus=1)) == "embedded"
ray.get(ray.remote(lambda: 1).remote())  # a worker process exists too
me = psutil.Process()
pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
sockets = [(c.laddr.ip, c.laddr.port, psutil.Process(c.pid).name())
           for c in psutil.net_connections("inet")
           if c.status == psutil.CONN_LISTEN and c.pid in pids]
shutdown()
print("SOCKETS", json.dumps(sockets))
"""


def test_embedded_cluster_listens_on_loopback_only():
    psutil = pytest.importorskip("psutil")
    assert psutil  # Ray depends on it
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=_env_without_ray_address())
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("SOCKETS "))
    sockets = json.loads(line.removeprefix("SOCKETS "))
    assert len(sockets) >= 3, sockets  # GCS, raylet, object manager at least
    loopback = ("127.0.0.1", "::1", "::ffff:127.0.0.1")  # the last: IPv4-mapped, dual stack
    exposed = [s for s in sockets if s[0] not in loopback]
    assert not exposed, f"listening beyond loopback: {exposed}"


# Two data-parallel learner ranks joined in one gloo group (its rendezvous store on rank 0),
# after a step together; then every socket the driver's process tree listens on.
GROUP_SCRIPT = """
import json, sys
import numpy as np
import psutil
import ray
from arl.actors.connect import connect, shutdown
from arl.actors.group import ActorGroup
from arl.actors.hosts import RayHost
from arl.actors.learner import LearnerActor
from arl.config import ModelConfig, RayConfig
from tests.builders import learner_cfg, random_trajectories

connect(RayConfig(address="local", num_cpus=2))
cfg = learner_cfg(lr=1e-3, mini_batches=1, micro_batch_size=4, num_workers=2)
group = ActorGroup(LearnerActor, [(ModelConfig(path=sys.argv[1], dtype="float32"), cfg, 10,
                                    0, 1.0, 1)] * 2, num_cpus=1,
                   host=RayHost())
address, port = group.get(group.submit_one(0, "rendezvous", ()))
group.get(group.submit("join_group", [(r, 2, address, port) for r in range(2)]))
batch = ray.put(random_trajectories(8, seed=0, vocab=300))
group.get(group.submit("step", [(np.ones(8, dtype=np.float32), np.ones(8, dtype=bool),
                                  batch)] * 2))
me = psutil.Process()
pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
sockets = [(c.laddr.ip, c.laddr.port) for c in psutil.net_connections("inet")
           if c.status == psutil.CONN_LISTEN and c.pid in pids]
shutdown()
print("SOCKETS", json.dumps({"address": address, "port": port, "sockets": sockets}))
"""


def test_a_multi_rank_learner_listens_on_loopback_only(tiny_model_dir):
    done = subprocess.run([sys.executable, "-c", GROUP_SCRIPT, tiny_model_dir], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**_env_without_ray_address(), "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("SOCKETS "))
    found = json.loads(line.removeprefix("SOCKETS "))
    sockets = [tuple(s) for s in found["sockets"]]
    assert found["address"] == "127.0.0.1"
    assert ("127.0.0.1", found["port"]) in sockets  # the rendezvous store, on loopback
    loopback = ("127.0.0.1", "::1", "::ffff:127.0.0.1")
    exposed = [s for s in sockets if s[0] not in loopback]
    assert not exposed, f"listening beyond loopback: {exposed}"


def _env_without_ray_address() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
