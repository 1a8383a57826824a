"""The embedded Ray that `arl train` starts listens on the loopback address only."""

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
from actors.connect import connect, shutdown
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


def _env_without_ray_address() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
