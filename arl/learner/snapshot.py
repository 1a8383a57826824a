"""What leaves a learner: its weights for the rollout engines, and its whole state for a
checkpoint (and back). Every rank of a group must call these (backends may gather); ranks
other than 0 get nothing back."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from arl.learner.backend import Backend
from arl.model.checkpoint.store import LearnerState


def export_weights(backend: Backend) -> dict[str, np.ndarray]:
    """The weights for rollout engines: HF state_dict names -> contiguous float32 numpy
    copies (numpy has no bf16; the engine casts to its dtype). Tied weights appear under
    each of their names, sharing one array. Later steps never change the returned arrays.
    Ranks other than 0 return {}."""
    state = backend.full_state_dict()
    if state is None:
        return {}
    arrays: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}
    out = {}
    for name, tensor in state.items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        if key not in arrays:
            arrays[key] = np.array(tensor.detach().to(torch.float32).cpu().numpy(), copy=True)
        out[name] = arrays[key]
    return out


def checkpoint_state(backend: Backend, counters: dict[str, int]) -> LearnerState | None:
    """A snapshot (copies) of parameters, AdamW state and the learner's counters (version,
    skipped_steps, skipped_in_row); None on ranks other than 0."""
    state = backend.checkpoint_state()
    if state is None:
        return None
    params, optimizer = state
    return LearnerState(params, optimizer, counters["version"], counters["skipped_steps"],
                        counters["skipped_in_row"])


def load_state(backend: Backend, model: torch.nn.Module, state: LearnerState) -> dict[str, Any]:
    """Restore a `checkpoint_state` snapshot into `backend` (same architecture, any backend
    or group size); return the counters. Raises ValueError if parameter names differ."""
    params = dict(model.named_parameters())
    if set(params) != set(state.model):
        missing, unexpected = set(params) - set(state.model), set(state.model) - set(params)
        raise ValueError(
            f"checkpoint does not fit the model: missing {sorted(missing)}, "
            f"unexpected {sorted(unexpected)}"
        )
    backend.load_state(state.model, state.optimizer)
    return {"version": state.version, "skipped_steps": state.skipped_steps,
            "skipped_in_row": state.skipped_in_row}
