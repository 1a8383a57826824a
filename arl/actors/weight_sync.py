"""Weight sync behind one interface: how a new policy version gets from the learner to every
rollout worker (`weight_sync.transport`; the wire format is arl/model/transport.py's).

`ObjectStoreSync`: learner rank 0 exports the weights once per version, Ray puts them in the
object store, and every rollout worker maps that one copy.
`CollectiveSync`: learner rank 0 and the W rollout workers form a process group of their own
(NCCL between GPUs, gloo over TCP between CPU processes); each sync is one call per member,
and rank 0 broadcasts the weights in buckets. A rebuilt worker is in no group: it gets the
object-store copy, and the group is formed anew before the next broadcast. A member that
waits longer than `weight_sync.timeout_s` for a peer fails its call (gloo raises; NCCL's
watchdog ends the process, which Ray reports dead): the driver re-forms the group or, when
the learner went, rebuilds the learner from its checkpoint.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import ray

from arl.actors.group import ActorGroup
from arl.actors.learner_group import LearnerGroup
from arl.config import Config

log = logging.getLogger(__name__)


class WeightSync(Protocol):
    """Contract: `publish(v)` sends the learner's current weights as version `v` and queues a
    load on every rollout worker without waiting (each loads them when its current call
    ends); it returns the loads' references. `finish()` waits for the sending side.
    `restore(w)` queues the current version on worker `w` alone (a rebuilt one) and returns
    the load's reference."""

    version: int

    def publish(self, version: int) -> list[Any]: ...

    def finish(self) -> None: ...

    def restore(self, worker: int) -> Any: ...


class ObjectStoreSync:
    """One export and one object-store copy per version; every worker maps it."""

    def __init__(self, learner: LearnerGroup, rollout: ActorGroup):
        self.learner, self.rollout = learner, rollout
        self.version = 0
        self._weights: Any = None  # this version's copy in the object store, once exported

    def publish(self, version: int) -> list[Any]:
        self.advance(version)
        return self.rollout.submit("update_weights", [(self.exported(), version)]
                                   * len(self.rollout))

    def advance(self, version: int) -> None:
        """The learner's weights are now `version`: the copy of the last one is stale (the new
        one is exported when first needed)."""
        self.version, self._weights = version, None

    def exported(self) -> Any:
        """The current version in the object store, exported at most once."""
        if self._weights is None:
            self._weights = self.learner.export()
        return self._weights

    def finish(self) -> None:
        pass  # the object store needs nothing back from the sender

    def restore(self, worker: int) -> Any:
        return self.rollout.submit_one(worker, "update_weights", (self.exported(), self.version))


class CollectiveSync:
    """A broadcast from learner rank 0 to every rollout worker, in buckets."""

    def __init__(self, cfg: Config, learner: LearnerGroup, rollout: ActorGroup):
        self.cfg, self.learner, self.rollout = cfg, learner, rollout
        self.fallback = ObjectStoreSync(learner, rollout)  # for rebuilt workers
        self.formed = False  # the group exists and has every current member
        self._sends: list[Any] = []

    @property
    def version(self) -> int:
        return self.fallback.version

    def publish(self, version: int) -> list[Any]:
        self.fallback.advance(version)  # a rebuilt worker gets this version from the store
        if not self.formed:
            self._form()
        self._sends = self.learner.broadcast()
        return self.rollout.submit("receive_weights", [(version,)] * len(self.rollout))

    def _form(self) -> None:
        """A new group of learner rank 0 and every rollout worker."""
        cfg = self.cfg
        layout = self.learner.weight_layout(cfg.model.dtype)
        address, port = self.learner.rendezvous()
        world = 1 + len(self.rollout)
        common = (cfg.weight_sync.transport, layout, int(cfg.weight_sync.bucket_mib * 2**20),
                  cfg.weight_sync.timeout_s)
        joins = [self.learner.join_sync(address, port, world, *common)]
        joins += self.rollout.submit("join_sync", [(address, port, w + 1, world, *common)
                                                   for w in range(len(self.rollout))])
        self.learner.get(joins)
        self.formed = True

    def finish(self) -> None:
        try:
            self.learner.get(self._sends)
        except ray.exceptions.RayError as err:  # a receiver vanished mid-broadcast
            log.warning("weight broadcast failed (%s); the group is formed anew", err)
            self.formed = False

    def restore(self, worker: int) -> Any:
        self.formed = False  # the rebuilt worker is in no group
        return self.fallback.restore(worker)


def make_weight_sync(cfg: Config, learner: LearnerGroup, rollout: ActorGroup) -> WeightSync:
    """The transport `weight_sync.transport` names."""
    if cfg.weight_sync.transport == "object_store":
        return ObjectStoreSync(learner, rollout)
    return CollectiveSync(cfg, learner, rollout)
