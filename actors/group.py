"""A group of identical workers, hosted as Ray actors or in this process.

Workers are plain classes. `ActorGroup` is the one place that turns them into Ray actors
(`ray.remote(cls)` at spawn time, never a decorator on the class) and the one place that
waits on their results. With `use_ray=False` the same calls run in-process, which keeps the
driver testable without a cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ray


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
    ):
        """max_restarts: how often Ray rebuilds a member that died (with the same constructor
        arguments); its in-flight calls fail and are not retried (the caller decides).
        scheduling: a Ray scheduling strategy per member (e.g. its placement-group bundle);
        None: Ray's default."""
        self.use_ray = use_ray
        if use_ray:
            remote_cls = ray.remote(cls)
            strategies = list(scheduling) if scheduling is not None else [None] * len(
                args_per_member)
            self.members = [
                remote_cls.options(
                    num_cpus=num_cpus, num_gpus=num_gpus, resources=dict(resources or {}),
                    name=f"{name}-{i}" if name else None,
                    max_restarts=max_restarts, max_task_retries=0,
                    scheduling_strategy=strategy,
                ).remote(*args)
                for i, (args, strategy) in enumerate(zip(args_per_member, strategies,
                                                         strict=True))
            ]
        else:
            self.members = [cls(*args) for args in args_per_member]

    def __len__(self) -> int:
        return len(self.members)

    def submit(
        self, method: str, args_per_member: Sequence[tuple[Any, ...]], num_returns: int = 1
    ) -> list[Any]:
        """Start `method` on every member; return object refs (or local results), in order."""
        if len(args_per_member) != len(self.members):
            raise ValueError(f"{len(args_per_member)} argument sets for {len(self)} members")
        if not self.use_ray:
            pairs = zip(self.members, args_per_member, strict=True)
            return [getattr(m, method)(*args) for m, args in pairs]
        return [
            getattr(m, method).options(num_returns=num_returns).remote(*args)
            for m, args in zip(self.members, args_per_member, strict=True)
        ]

    def submit_one(self, index: int, method: str, args: tuple[Any, ...],
                   num_returns: int = 1) -> Any:
        """Start `method` on member `index` only."""
        member = self.members[index]
        if not self.use_ray:
            return getattr(member, method)(*args)
        return getattr(member, method).options(num_returns=num_returns).remote(*args)

    def replace(self, index: int) -> None:
        """Kill member `index` (a hung one) and let Ray rebuild it (needs max_restarts)."""
        if self.use_ray:
            ray.kill(self.members[index], no_restart=False)

    def call(self, method: str, *args: Any) -> list[Any]:
        """Run `method(*args)` on every member and wait for the results."""
        return self.get(self.submit(method, [args] * len(self.members)))

    def get(self, refs: Any, timeout: float | None = None) -> Any:
        """Resolve object refs produced by this group (a no-op in-process). Raises
        ray.exceptions.GetTimeoutError after `timeout` seconds, RayActorError if the member
        died."""
        return ray.get(refs, timeout=timeout) if self.use_ray else refs

    def wait(self, refs: Sequence[Any], timeout: float | None) -> list[int]:
        """Indices of the `refs` that are ready: wait up to `timeout` s (None: as long as it
        takes) for the first, then take every other one already done. In-process every
        result is ready."""
        if not self.use_ray:
            return list(range(len(refs)))
        first, _ = ray.wait(list(refs), num_returns=1, timeout=timeout)
        if not first:
            return []
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        done = set(ready)
        return [i for i, ref in enumerate(refs) if ref in done]

    def put(self, value: Any) -> Any:
        """Store `value` once for every member to read (the object store, or itself)."""
        return ray.put(value) if self.use_ray else value

    def close(self, timeout_s: float = 10.0) -> None:
        """Let each member free what it holds (`close`, where its class has one: an engine's
        shared memory and helper processes), then end it."""
        if self.use_ray:
            refs = [m.close.remote() for m in self.members if hasattr(m, "close")]
            if refs:
                ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
            for member in self.members:
                ray.kill(member)
        else:
            for member in self.members:
                close = getattr(member, "close", None)
                if close is not None:
                    close()
        self.members = []
