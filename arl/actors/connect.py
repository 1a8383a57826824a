"""Connecting to Ray: join a running cluster, or start an embedded one bound to localhost."""

from __future__ import annotations

import logging
import os

import ray

from arl.config import RayConfig

log = logging.getLogger(__name__)


def connect(cfg: RayConfig) -> str:
    """Initialise Ray in this process; return "existing" or "embedded".

    address=auto joins the cluster named by RAY_ADDRESS or started with `ray start` on this
    machine (this is how `ray job submit` runs us), and otherwise starts an embedded cluster.
    address=local always starts an embedded one; any other value is a cluster address.
    An embedded cluster binds to `cfg.host` with the dashboard off unless configured.
    """
    if ray.is_initialized():
        return "existing"
    # Workers inherit this process's environment; never hand them secrets through runtime_env.
    if cfg.address not in ("auto", "local"):
        ray.init(address=cfg.address, log_to_driver=True)
        return "existing"
    if cfg.address == "auto":
        try:
            ray.init(address="auto", log_to_driver=True)
            return "existing"
        except ConnectionError:
            log.info("no running Ray cluster found; starting an embedded one")
    if cfg.host in ("127.0.0.1", "localhost", "::1"):
        _keep_on_loopback()
    ray.init(
        address="local",
        num_cpus=cfg.num_cpus or os.cpu_count(),
        include_dashboard=cfg.dashboard,
        dashboard_host=cfg.host,
        _node_ip_address=cfg.host,
        log_to_driver=True,
        configure_logging=False,
    )
    return "embedded"


def _keep_on_loopback() -> None:
    """Make an embedded cluster listen on the loopback address only.

    On Linux, Ray replaces a loopback node address with the machine's routable IP, so every
    Ray server would listen on the network. Ray's own switch for single-machine clusters
    (the one it uses on macOS and Windows) keeps them on loopback; it is read through the
    module at call time, and the environment variable carries it to child processes.
    """
    from ray._private import ray_constants

    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def cluster_resources(address: str) -> dict[str, float]:
    """The total resources of the running cluster at `address`, from a short-lived driver
    connection (nothing is started)."""
    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    try:
        return dict(ray.cluster_resources())
    finally:
        ray.shutdown()


def shutdown() -> None:
    if ray.is_initialized():
        ray.shutdown()
