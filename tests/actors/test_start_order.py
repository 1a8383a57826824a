"""The cluster starts its rollout engines, waits until every one has loaded, and only then
starts the learner: vLLM sizes its KV cache from the memory it finds free, which a learner
allocating at the same time would take."""

from __future__ import annotations

from arl.actors.cluster import Cluster
from arl.actors.hosts import LocalHost
from tests.builders import ci_config


class RecordingHost(LocalHost):
    """The in-process host, noting each member it starts and each call it runs."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def spawn(self, cls, args, options):
        member = super().spawn(cls, args, options)  # constructed (loaded) when this returns
        self.events.append(f"spawn {cls.__name__}")
        return member

    def call(self, member, method, args, num_returns):
        self.events.append(f"{type(member).__name__}.{method}")
        return super().call(member, method, args, num_returns)


def test_rollout_engines_load_before_the_learner_starts(tmp_path, warm_model_dir):
    cfg = ci_config(warm_model_dir, tmp_path, "rollout.num_workers=2")
    host = RecordingHost()
    with Cluster(cfg, host):
        pass
    events = host.events
    learner = events.index("spawn LearnerActor")
    assert events[:learner] == ["spawn RolloutActor"] * 2 + ["RolloutActor.loaded"] * 2
