"""Weight sync transports: a bucketed gloo broadcast delivers exactly what the object store
delivers."""

from __future__ import annotations

import json

import pytest
import torch

from arl.app.train import train
from arl.config import ConfigError, load_config
from arl.model.transport import layout_of


def test_layout_keeps_tied_weights_once_and_buckets_by_bytes():
    tied = torch.zeros(4, 3)
    state = [("a", torch.zeros(10)), ("emb", tied), ("b", torch.zeros(2, 2)), ("head", tied)]
    layout = layout_of(state, "float32")
    assert layout.names == ("a", "emb", "b") and layout.aliases == (("head", "emb"),)
    assert layout.shapes == ((10,), (4, 3), (2, 2))
    assert layout.buckets(64) == [[0], [1, 2]]  # 40 B | 48 + 16 B
    assert layout.buckets(1) == [[0], [1], [2]]  # a tensor larger than a bucket goes alone
    assert layout_of(state, "bfloat16").buckets(64) == [[0, 1, 2]]  # half the bytes


def test_a_receive_streams_the_broadcast_bucket_by_bucket():
    """A receiver reads (name, tensor) pairs as buckets arrive, each tied name right after
    the tensor it shares; together they are exactly what was sent."""
    import inspect
    import threading

    from arl.model.transport import SyncGroup, free_port

    tied = torch.arange(12.0).view(4, 3)
    state = {"a": torch.arange(10.0), "emb": tied, "b": torch.ones(2, 2), "head": tied}
    layout = layout_of(state.items(), "float32")
    port = free_port()

    def send() -> None:
        group = SyncGroup("127.0.0.1", port, 0, 2, "gloo", 60.0)
        group.send(state, layout, 48)
        group.close()

    sender = threading.Thread(target=send)
    sender.start()
    receiver = SyncGroup("127.0.0.1", port, 1, 2, "gloo", 60.0)
    stream = receiver.receive_stream(layout, 48)  # buckets [a], [emb], [b]
    assert inspect.isgenerator(stream)
    pairs = list(stream)
    sender.join()
    receiver.close()
    assert [name for name, _ in pairs] == ["a", "emb", "head", "b"]
    for name, tensor in pairs:
        assert torch.equal(tensor, state[name])
    assert layout.shapes_by_name() == {n: tuple(t.shape) for n, t in state.items()}


def test_a_peer_that_never_sends_fails_the_receive_within_the_timeout():
    """A hung learner (it joined the group, then never broadcast) ends a worker's receive
    with an error after weight_sync.timeout_s, instead of blocking it for good."""
    import threading

    from arl.model.transport import SyncGroup, free_port

    layout = layout_of([("a", torch.zeros(8))], "float32")
    port, joined, done = free_port(), threading.Event(), threading.Event()

    def hang() -> None:
        group = SyncGroup("127.0.0.1", port, 0, 2, "gloo", 2.0)
        joined.set()
        done.wait(60)  # never sends
        group.close()

    sender = threading.Thread(target=hang)
    sender.start()
    receiver = SyncGroup("127.0.0.1", port, 1, 2, "gloo", 2.0)
    joined.wait(60)
    try:
        with pytest.raises(RuntimeError):
            list(receiver.receive_stream(layout, 1 << 20))
    finally:
        done.set()
        sender.join()
        receiver.close()


def test_collective_transports_are_checked_before_ray():
    with pytest.raises(ConfigError, match="weight_sync.transport"):
        load_config(["configs/ci.yaml"], ["weight_sync.transport=gloo", "mode=async"],
                    check_paths=False)
    with pytest.raises(ConfigError, match="learner.resources.gpus"):
        load_config(["configs/ci.yaml"], ["weight_sync.transport=nccl"], check_paths=False)


@pytest.mark.slow
def test_gloo_broadcast_trains_exactly_like_the_object_store(tmp_path, warm_model_dir):
    """Two rollout workers, weights in buckets of 50 KiB (several per sync): the same seeds
    give the same rewards, losses and sampler/learner gaps as the object store."""
    columns = ("rollout/reward_mean", "learner/loss", "gspo/ratio_mean",
               "rollout/sampler_logprob_gap", "rollout/response_len")
    results = {}
    for transport in ("object_store", "gloo"):
        cfg = load_config(["configs/ci.yaml"], [
            f"model.path={warm_model_dir}", f"output_dir={tmp_path}", f"run_name={transport}",
            "ray.address=local", "ray.num_cpus=3", "rollout.num_workers=2",
            f"weight_sync.transport={transport}", "weight_sync.bucket_mib=0.05"])
        train(cfg)
        with open(tmp_path / transport / "metrics.jsonl") as f:
            rows = [json.loads(line) for line in f]
        assert [r["step"] for r in rows] == [0, 1, 2]
        results[transport] = [[r[k] for k in columns] for r in rows]
    assert results["gloo"] == results["object_store"]
    assert any(row[3] > 0 for row in results["gloo"]), "sampler gaps were measured"


def test_gloo_sync_delivers_the_learner_weights_to_every_worker(warm_model_dir):
    import numpy as np
    import ray

    from arl.actors.cluster import Cluster

    cfg = load_config(["configs/ci.yaml"], [
        f"model.path={warm_model_dir}", "ray.address=local", "ray.num_cpus=3",
        "rollout.num_workers=2", "model.dtype=float32", "weight_sync.transport=gloo",
        "weight_sync.bucket_mib=0.05"])
    with Cluster(cfg) as cluster:
        learner = cluster._learner.group
        learner.get(learner.members[0].__ray_call__.remote(  # weights the folder does not have
            lambda w: [p.data.add_(0.01) for p in w.learner.model.parameters()] and None))
        cluster.push_weights(5)
        want = learner.get(learner.submit("export_weights", [()]))[0]
        for member in cluster._rollout.group.members:
            got, version, joined = ray.get(member.__ray_call__.remote(lambda w: (
                {k: v.numpy().copy() for k, v in w.engine.model.state_dict().items()},
                w.engine.version, w.sync is not None)))
            assert joined and version == 5, "the weights came by the broadcast"
            assert set(got) == set(want)
            for name in want:
                np.testing.assert_array_equal(got[name], want[name])
