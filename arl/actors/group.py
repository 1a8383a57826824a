"""A group of identical workers, hosted as Ray actors or in this process.

Workers are plain classes. `ActorGroup` is the one place that turns them into Ray actors
(`ray.remote(cls)` at spawn time, never a decorator on the class) and the one place that
waits on their results. With `use_ray=False` the same calls run in-process, which keeps the
driver testable without a cluster: a `Host` (Ray's or this process's) spawns members, calls
their methods and resolves results, and the group's own code has one path for both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ray


def until_rebuilt(call: Callable[[], Any], what: str, wait_s: float,
                  on_dead: Callable[[], None] = lambda: None) -> Any:
    """`call()` (a call to an actor, resolved) once the actor is back from a Ray restart:
    retried while it is restarting, for up to `wait_s` s. If it is dead for good, `on_dead()`
    first (it may raise a better error), then RuntimeError naming `what`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return call()
        except ray.exceptions.ActorDiedError as err:
            on_dead()
            raise RuntimeError(f"{what} is dead for good (rollout.max_restarts exceeded)"
                               ) from err
        except ray.exceptions.RayActorError:  # still restarting
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@dataclass(frozen=True)
class Done:
    """An in-process call's outcome, standing in for an object reference."""

    value: Any = None
    error: BaseException | None = None


class LocalHost:
    """Members are plain objects; a call runs at once and its result (or error) is ready."""

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
    """Members are Ray actors built by `ray.remote(cls)`; calls return object references."""

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


class ActorGroup:
    """N instances of `cls`, each built with its own constructor arguments.

    Methods are called on all members at once; results come back in member order.
    `num_returns > 1` splits a method's tuple result into separate object references, so a
    large part (e.g. trajectories) can stay in the object store while a small part travels.
    """

    def __init__(
        self,
        cls: type,
        args_per_member: Sequence[tuple[Any, ...]],
        *,
        num_cpus: float,
        num_gpus: float = 0.0,
        resources: dict[str, float] | None = None,
        use_ray: bool = True,
        name: str = "",
        max_restarts: int = 0,
        scheduling: Sequence[Any] | None = None,
        concurrency_groups: dict[str, int] | None = None,
    ):
        """max_restarts: how often Ray rebuilds a member that died (with the same constructor
        arguments); its in-flight calls fail and are not retried (the caller decides).
        scheduling: a Ray scheduling strategy per member (e.g. its placement-group bundle);
        None: Ray's default. concurrency_groups: Ray concurrency groups (name -> threads)
        beside the default one, which runs one call at a time."""
        self.host = RayHost() if use_ray else LocalHost()
        strategies = list(scheduling) if scheduling is not None else [None] * len(args_per_member)
        self.members = [
            self.host.spawn(cls, args, {
                "num_cpus": num_cpus, "num_gpus": num_gpus, "resources": dict(resources or {}),
                "name": f"{name}-{i}" if name else None, "max_restarts": max_restarts,
                "max_task_retries": 0, "scheduling_strategy": strategy,
                **({"concurrency_groups": concurrency_groups} if concurrency_groups else {})})
            for i, (args, strategy) in enumerate(zip(args_per_member, strategies, strict=True))
        ]

    def __len__(self) -> int:
        return len(self.members)

    def submit(
        self, method: str, args_per_member: Sequence[tuple[Any, ...]], num_returns: int = 1
    ) -> list[Any]:
        """Start `method` on every member; return their results' references, in order."""
        if len(args_per_member) != len(self.members):
            raise ValueError(f"{len(args_per_member)} argument sets for {len(self)} members")
        return [self.host.call(m, method, args, num_returns)
                for m, args in zip(self.members, args_per_member, strict=True)]

    def submit_one(self, index: int, method: str, args: tuple[Any, ...],
                   num_returns: int = 1) -> Any:
        """Start `method` on member `index` only."""
        return self.host.call(self.members[index], method, args, num_returns)

    def replace(self, index: int) -> None:
        """Kill member `index` (a hung one) and let Ray rebuild it (needs max_restarts)."""
        self.host.kill(self.members[index], restart=True)

    def get(self, refs: Any, timeout: float | None = None) -> Any:
        """Resolve references produced by this group. Raises what the call raised, and under
        Ray GetTimeoutError after `timeout` seconds or RayActorError if the member died."""
        return self.host.get(refs, timeout)

    def wait(self, refs: Sequence[Any], timeout: float | None) -> list[int]:
        """Indices of the `refs` that are ready: wait up to `timeout` s (None: as long as it
        takes) for the first, then take every other one already done."""
        return self.host.ready(refs, timeout)

    def close(self, timeout_s: float = 10.0) -> None:
        """Let each member free what it holds (`close`, where its class has one: an engine's
        shared memory and helper processes), then end it."""
        closes = [self.host.call(m, "close", (), 1) for m in self.members
                  if hasattr(m, "close")]
        if closes:
            self.host.settle(closes, timeout_s)
        for member in self.members:
            self.host.kill(member, restart=False)
        self.members = []
