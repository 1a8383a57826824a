"""The learner worker as a Ray actor: arl/learner/worker.py's plain class, with the model
folder shipped to its node (arl/actors/model_files.py) and the node's address for the
rendezvous of a data-parallel group or a weight-sync group."""

from __future__ import annotations

from arl.actors.model_files import ShippedModel, local_model
from arl.config import LearnerConfig, ModelConfig
from arl.learner.worker import LearnerWorker
from arl.model.transport import free_port


class LearnerActor(LearnerWorker):
    """A LearnerWorker on a node of the cluster (ActorGroup spawns it)."""

    def __init__(self, model: ModelConfig, cfg: LearnerConfig, total_steps: int, seed: int,
                 temperature: float, threads: int, shipped: ShippedModel | None = None):
        super().__init__(local_model(model, shipped), cfg, total_steps, seed, temperature,
                         threads)

    def rendezvous(self) -> tuple[str, int]:
        """(this node's IP, a free TCP port there): where rank 0 of a group listens."""
        import ray

        address = ray.util.get_node_ip_address()
        return address, free_port(address)
