"""A group of identical workers on one host (arl/actors/hosts.py: Ray actors or plain
objects in this process).

Workers are plain classes. `ActorGroup` is the one place that spawns them on a host (under
Ray: `ray.remote(cls)` at spawn time, never a decorator on the class) and the one place that
waits on their results; its code has one path for every host.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import ray

from arl.actors.hosts import Host


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
        host: Host,
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
        self.host = host
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
