"""Where actors go: the resources they reserve checked against the cluster's, and one
placement group with a bundle per actor (`ray.placement`)."""

from __future__ import annotations

from typing import Any

import ray

from arl.config import Config


def require_resource(needed: float, what: str, resource: str = "CPU") -> None:
    """Raise RuntimeError if the cluster has less of `resource` (CPU, GPU) than the actors
    will reserve: Ray would otherwise wait forever for the missing part, silently."""
    total = ray.cluster_resources().get(resource, 0.0)
    if needed > total:
        hint = ("raise ray.num_cpus (an embedded cluster) or lower the actors' CPUs"
                if resource == "CPU" else f"start nodes that offer {resource} (`ray start "
                f"--resources ...` for custom ones) or lower what the actors reserve")
        raise RuntimeError(
            f"the actors reserve {needed:g} {resource}s ({what}) but the Ray cluster has "
            f"{total:g}; {hint}")


def require_resources(cfg: Config) -> None:
    """Fail now, naming the keys, if the actors ask for more than the cluster has."""
    m, w, r = cfg.learner.resources.num_workers, cfg.rollout.num_workers, cfg.rollout
    require_resource(m * cfg.learner.resources.cpus + w * (r.cpus_per_worker
                                                 + r.env_actors * r.cpus_per_env_actor),
                     "learner.resources.num_workers * learner.resources.cpus + "
                     "rollout.num_workers * (rollout.cpus_per_worker + rollout.env_actors * "
                     "rollout.cpus_per_env_actor)")
    gpus = m * cfg.learner.resources.gpus + w * cfg.rollout.gpus_per_worker
    if gpus > 0:
        require_resource(gpus, "learner.resources.num_workers * learner.resources.gpus + "
                         "rollout.num_workers * rollout.gpus_per_worker", "GPU")
    for name in set(cfg.learner.resources.custom) | set(cfg.rollout.resources):
        needed = (m * cfg.learner.resources.custom.get(name, 0.0)
                  + w * cfg.rollout.resources.get(name, 0.0))
        require_resource(needed, "learner.resources.num_workers * "
                         f"learner.resources.custom.{name} + "
                         f"rollout.num_workers * rollout.resources.{name}", name)


def actor_placement(cfg: Config) -> tuple[Any, list | None, list | None]:
    """(the placement group or None, a scheduling strategy per learner rank, one per rollout
    worker) as `ray.placement` asks: none leaves placement to Ray; otherwise one group holds
    a bundle per actor, learner ranks first, each bundle exactly what its actor reserves
    (fractional GPUs included: two actors with 0.5 each can share one GPU)."""
    if cfg.ray.placement == "none":
        return None, None, None
    m, w = cfg.learner.resources.num_workers, cfg.rollout.num_workers
    res = cfg.learner.resources
    learner = {"CPU": res.cpus, "GPU": res.gpus, **res.custom}
    rollout = {"CPU": cfg.rollout.cpus_per_worker, "GPU": cfg.rollout.gpus_per_worker,
               **cfg.rollout.resources}
    group = place(cfg.ray.placement, [learner] * m + [rollout] * w,
                  cfg.ray.placement_timeout_s, f"{cfg.run_name}-actors")
    return (group, [in_bundle(group, i) for i in range(m)],
            [in_bundle(group, m + i) for i in range(w)])


def place(strategy: str, bundles: list[dict[str, float]], timeout_s: float, name: str):
    """Reserve one placement group: a bundle per actor, placed by `strategy` (pack: as few
    nodes as possible; spread: as many; strict_*: exactly so, or not at all). Returns
    the group. Raises RuntimeError naming `ray.placement` if Ray cannot place it in time."""
    from ray.util import placement_group, remove_placement_group

    # Ray refuses zero amounts in a bundle: an actor that needs no GPU asks for none.
    bundles = [{k: v for k, v in b.items() if v > 0} for b in bundles]
    group = placement_group(bundles, strategy=strategy.upper(), name=name)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        remove_placement_group(group)
        raise RuntimeError(
            f"Ray could not place the actors' bundles {bundles} with ray.placement="
            f"{strategy} within {timeout_s:g}s (ray.placement_timeout_s): the nodes lack the "
            "resources, or strict_spread asks for more nodes than there are")
    return group


def in_bundle(group, index: int):
    """The scheduling strategy that puts an actor into bundle `index` of `group`."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return PlacementGroupSchedulingStrategy(placement_group=group,
                                            placement_group_bundle_index=index)


def unplace(group) -> None:
    from ray.util import remove_placement_group

    if group is not None and ray.is_initialized():
        remove_placement_group(group)
