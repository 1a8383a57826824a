"""Where a run's workers live: `RayHost` (Ray actors on a cluster) or `LocalHost` (plain
objects in this process). Both implement one `Host` interface, so the cluster, its groups and
the training loop have one code path; the in-process host keeps the driver testable without
a cluster.

A host opens once per run (`open`: connect, reserve, place; `close`: release what it
opened), then spawns workers, calls their methods and resolves the results.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import ray

from arl.actors import connect, placement
from arl.actors.model_files import ShippedModel, cluster_nodes, ship
from arl.config import Config


@dataclass(frozen=True)
class Placement:
    """Where a run's actors go: a Ray scheduling strategy per learner rank and per rollout
    worker (None: the host decides), and the model folder shipped to nodes that do not see
    the driver's (None: every node sees it)."""

    learner: list | None = None
    rollout: list | None = None
    shipped: ShippedModel | None = None


@dataclass(frozen=True)
class Done:
    """An in-process call's outcome, standing in for an object reference."""

    value: Any = None
    error: BaseException | None = None


class Host(Protocol):
    """Contract: `open(cfg)` makes the host ready for `cfg`'s actors (raising ValueError or
    RuntimeError naming the config key it cannot serve) and says where they go; `close()`
    releases what `open` took. `spawn` builds a worker, `call` starts one of its methods
    (`num_returns` > 1 splits a tuple result into that many references), `get` resolves
    references (raising what the call raised), `ready` lists the indices of the references
    done (waiting up to `timeout` s for the first), `settle` waits up to `timeout` s for all,
    `kill` ends a worker (`restart`: let the host rebuild it)."""

    def open(self, cfg: Config) -> Placement: ...

    def close(self) -> None: ...

    def spawn(self, cls: type, args: tuple, options: dict) -> Any: ...

    def call(self, member: Any, method: str, args: tuple, num_returns: int) -> Any: ...

    def get(self, refs: Any, timeout: float | None) -> Any: ...

    def ready(self, refs: Sequence[Any], timeout: float | None) -> list[int]: ...

    def settle(self, refs: Sequence[Any], timeout: float) -> None: ...

    def kill(self, member: Any, restart: bool) -> None: ...


class LocalHost:
    """Members are plain objects; a call runs at once and its result (or error) is ready."""

    def open(self, cfg: Config) -> Placement:
        if cfg.learner.resources.num_workers > 1:
            raise ValueError("learner.resources.num_workers > 1 needs Ray (the in-process "
                             "host runs one learner)")
        if cfg.weight_sync.transport != "object_store":
            raise ValueError("weight_sync.transport nccl | gloo needs Ray (the in-process "
                             "host has no process group)")
        if cfg.rollout.env_actors:
            raise ValueError("rollout.env_actors > 0 needs Ray (the in-process host runs "
                             "envs inside the rollout worker)")
        return Placement()

    def close(self) -> None:
        pass  # nothing was reserved

    def spawn(self, cls: type, args: tuple, options: dict) -> Any:
        return cls(*args)

    def call(self, member: Any, method: str, args: tuple, num_returns: int) -> Any:
        # Arguments that are results of other calls are resolved first, as Ray resolves
        # object references passed at the top level of a call.
        args = tuple(self.get(a, None) if isinstance(a, Done) else a for a in args)
        try:
            result = getattr(member, method)(*args)
        except Exception as err:  # raised where the caller resolves it, as Ray does
            return Done(error=err)
        if num_returns == 1:
            return Done(result)
        return [Done(part) for part in result]

    def get(self, refs: Any, timeout: float | None) -> Any:
        if isinstance(refs, list):
            return [self.get(r, timeout) for r in refs]
        if refs.error is not None:
            raise refs.error
        return refs.value

    def ready(self, refs: Sequence[Any], timeout: float | None) -> list[int]:
        return list(range(len(refs)))

    def settle(self, refs: Sequence[Any], timeout: float) -> None:
        pass  # every in-process call has ended already

    def kill(self, member: Any, restart: bool) -> None:
        pass  # an object in this process ends when nothing refers to it


class RayHost:
    """Members are Ray actors built by `ray.remote(cls)`; calls return object references.
    `open` joins (or starts, `ray.address`) a cluster, checks its resources, reserves the
    placement group (`ray.placement`) and ships the model folder when there are other nodes;
    `close` removes the group and shuts an embedded cluster down again."""

    def __init__(self) -> None:
        self.connected = ""  # "existing" or "embedded" once open
        self.placement_group: Any = None

    def open(self, cfg: Config) -> Placement:
        self.connected = connect.connect(cfg.ray)
        placement.require_resources(cfg)
        self.placement_group, learner_at, rollout_at = placement.actor_placement(cfg)
        # Nodes that do not see the driver's model folder get it through the object store.
        shipped = ship(cfg.model.path) if cluster_nodes() > 1 else None
        return Placement(learner_at, rollout_at, shipped)

    def close(self) -> None:
        placement.unplace(self.placement_group)
        self.placement_group = None
        if self.connected == "embedded":
            connect.shutdown()
        self.connected = ""

    def spawn(self, cls: type, args: tuple, options: dict) -> Any:
        groups = options.pop("concurrency_groups", None)  # Ray takes them only here
        remote = ray.remote(concurrency_groups=groups)(cls) if groups else ray.remote(cls)
        return remote.options(**options).remote(*args)

    def call(self, member: Any, method: str, args: tuple, num_returns: int) -> Any:
        return getattr(member, method).options(num_returns=num_returns).remote(*args)

    def get(self, refs: Any, timeout: float | None) -> Any:
        return ray.get(refs, timeout=timeout)

    def ready(self, refs: Sequence[Any], timeout: float | None) -> list[int]:
        first, _ = ray.wait(list(refs), num_returns=1, timeout=timeout)
        if not first:
            return []
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        return [i for i, ref in enumerate(refs) if ref in set(done)]

    def settle(self, refs: Sequence[Any], timeout: float) -> None:
        ray.wait(list(refs), num_returns=len(refs), timeout=timeout)

    def kill(self, member: Any, restart: bool) -> None:
        ray.kill(member, no_restart=not restart)
