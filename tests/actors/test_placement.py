"""Placement groups from config (`ray.placement`): every actor lands in its own bundle, and a
group Ray cannot place fails fast, naming the key."""

from __future__ import annotations

import pytest

from arl.actors.cluster import Cluster
from tests.builders import ci_config


def _cfg(model_dir, *overrides):
    return ci_config(model_dir, None, "ray.num_cpus=3", "rollout.num_workers=2", *overrides)


def test_every_actor_runs_in_its_bundle(warm_model_dir):
    import ray
    from ray.util import placement_group_table

    with Cluster(_cfg(warm_model_dir, "ray.placement=pack")) as cluster:
        table = placement_group_table(cluster.host.placement_group)
        assert table["strategy"] == "PACK" and table["state"] == "CREATED"
        assert list(table["bundles"].values()) == [{"CPU": 1.0}] * 3  # learner, 2 workers
        members = cluster._learner.group.members + cluster._rollout.group.members
        where = ray.get([m.__ray_call__.remote(
            lambda _: ray.get_runtime_context().get_placement_group_id()) for m in members])
        assert where == [cluster.host.placement_group.id.hex()] * 3
        cluster.push_weights(0)  # and they work there
    assert not ray.is_initialized(), "the embedded cluster is gone, and its group with it"


def test_an_unplaceable_group_fails_fast_naming_the_key(warm_model_dir):
    import ray

    cfg = _cfg(warm_model_dir, "ray.placement=strict_spread", "ray.placement_timeout_s=3")
    with pytest.raises(RuntimeError, match="ray.placement=strict_spread"):
        with Cluster(cfg):
            pass
    assert not ray.is_initialized()


def test_custom_resources_the_cluster_lacks_fail_fast_naming_the_keys(warm_model_dir):
    """learner.resources.custom and rollout.resources are counted before any actor starts."""
    import ray

    cfg = _cfg(warm_model_dir, "learner.resources.custom={gpu_node: 1}")
    with pytest.raises(RuntimeError, match="learner.resources.custom.gpu_node"):
        with Cluster(cfg):
            pass
    assert not ray.is_initialized()
