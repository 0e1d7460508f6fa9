"""Shuffle quality, measured on what a loader actually yielded (pure, no IO)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def gap_score(order: np.ndarray) -> float:
    """Mean |gap| between consecutive sample indices, relative to a uniform shuffle's.

    A uniform random permutation of n items has E|gap| ~= n/3, so it scores ~1.0; storage
    order scores ~3/n. Clipped to 1.
    """
    order = np.asarray(order, dtype=np.int64)
    if order.size < 2:
        return 1.0
    span = int(order.max() - order.min()) + 1
    mean_gap = float(np.abs(np.diff(order)).mean())
    return min(1.0, mean_gap / (span / 3))


def chunk_diversity(batches: Sequence[np.ndarray], unit_length: int, num_units: int) -> float:
    """Mean distinct units per batch over the most a batch of that size could touch."""
    if not batches:
        return 0.0
    scores = [
        np.unique(np.asarray(b) // unit_length).size / min(len(b), num_units) for b in batches
    ]
    return float(np.mean(scores))
