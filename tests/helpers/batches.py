"""Batches compared by value, and states put through what a checkpoint does to them or
read for what they record."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch


def torch_roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint does to a state: torch.save then torch.load."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def batch_key(batch: Mapping[str, Any]) -> tuple[Any, ...]:
    """A comparable fingerprint of a batch: its sample indices and every value."""
    return tuple(
        (name, tuple(host.shape), host.tobytes())
        for name, host in ((n, as_numpy(v)) for n, v in sorted(batch.items()))
    )


def as_numpy(value: Any) -> np.ndarray:
    """Host copy of an array or a tensor on any device."""
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


def recorded_unit_grid(state: Any) -> dict[str, int]:
    """The `unit_grid` a loader's state records (`ChunkPermuteNode`'s config), wherever
    the graph nests that node; empty if none is recorded."""
    if isinstance(state, Mapping):
        if "unit_grid" in state:
            return dict(state["unit_grid"])
        inner: list[Any] = list(state.values())
    elif isinstance(state, list):
        inner = state
    else:
        return {}
    for value in inner:
        found = recorded_unit_grid(value)
        if found:
            return found
    return {}
