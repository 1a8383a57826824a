"""What both rollout engines check before they load weights: names and shapes against the
model's own, tied names filled in, numpy turned into tensors without a copy."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


def as_tensor(value: Any) -> torch.Tensor:
    """numpy -> tensor without a copy (a non-contiguous array is made contiguous first);
    tensors pass through."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(value))
    if isinstance(value, torch.Tensor):
        return value
    raise TypeError(f"weights must be numpy arrays or torch tensors, got {type(value).__name__}")


def check_state(state: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]],
                complete: bool = True) -> None:
    """Raise ValueError if `state` has a name not in `expected`, a shape that differs, or
    (with `complete`) lacks one of the expected names."""
    check_shapes({k: tuple(v.shape) for k, v in state.items()}, expected, complete)


def check_shapes(shapes: Mapping[str, tuple[int, ...]],
                 expected: Mapping[str, tuple[int, ...]], complete: bool = True) -> None:
    """`check_state` on shapes alone: weights that have not arrived yet."""
    missing = sorted(set(expected) - set(shapes)) if complete else []
    unexpected = sorted(set(shapes) - set(expected))
    if missing or unexpected:
        raise ValueError(
            f"state dict mismatch: missing={missing[:5]} unexpected={unexpected[:5]}")
    bad = [k for k, v in shapes.items() if tuple(v) != tuple(expected[k])]
    if bad:
        raise ValueError(f"shape mismatch for {bad[:5]}")


def tied_groups(model: torch.nn.Module) -> list[list[str]]:
    """State-dict names that share one tensor (tied weights), in state-dict order."""
    groups: dict[int, list[str]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(tensor), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def complete_tied(state: dict[str, Any], groups: list[list[str]]) -> dict[str, Any]:
    """Give every name of a tied group the value of the first group name present."""
    for group in groups:
        source = next((name for name in group if name in state), None)
        if source is not None:
            for name in group:
                state[name] = state[source]
    return state
