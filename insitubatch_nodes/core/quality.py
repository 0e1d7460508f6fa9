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


def distinct_units_per_batch(batches: Sequence[np.ndarray], unit_length: int) -> float:
    """Mean number of distinct units in a batch (a unit: `unit_length` consecutive
    sample ids), 0.0 for no batch.

    Args:
        batches: each batch's sample ids.
        unit_length: samples per unit.
    """
    if not batches:
        return 0.0
    return float(np.mean([np.unique(np.asarray(b) // unit_length).size for b in batches]))


def uniform_distinct_units(unit_sizes: np.ndarray, batch_size: int) -> float:
    """The exact expectation of `distinct_units_per_batch` under a uniform global shuffle:
    a batch is `batch_size` samples drawn without replacement from all of them, and unit
    u is missing with probability prod_i (N - n_u - i) / (N - i), i < batch_size.

    Args:
        unit_sizes: samples of each unit of the split.
        batch_size: samples per batch.
    """
    sizes = np.asarray(unit_sizes, dtype=np.float64)
    total = sizes.sum()
    draws = min(batch_size, int(total))
    i = np.arange(draws, dtype=np.float64)
    distinct, counts = np.unique(sizes, return_counts=True)
    ratios = np.clip((total - distinct[:, None] - i[None, :]) / (total - i[None, :]), 0, None)
    missing = np.prod(ratios, axis=1)
    return float(np.sum(counts * (1.0 - missing)))


def mean_time_distance(batches: Sequence[np.ndarray]) -> float:
    """Mean |t_i - t_j| over pairs of distinct samples of a batch, averaged over batches
    (batches of one sample skipped), so that a batch of distinct but neighbouring units
    does not pass for a mixed one.

    Args:
        batches: each batch's sample ids (time steps, or anchors).
    """
    values = [_mean_pair_distance(np.asarray(b)) for b in batches if len(b) > 1]
    return float(np.mean(values)) if values else 0.0


def uniform_time_distance(samples: np.ndarray) -> float:
    """The exact expectation of `mean_time_distance` under a uniform global shuffle: the
    mean |t_i - t_j| over all pairs of distinct samples of the split.

    Args:
        samples: the split's sample ids.
    """
    return _mean_pair_distance(np.asarray(samples))


def _mean_pair_distance(values: np.ndarray) -> float:
    """Mean |x - y| over unordered pairs of distinct positions, in O(n log n)."""
    ordered = np.sort(values.astype(np.float64))
    n = ordered.size
    if n < 2:
        return 0.0
    weights = 2 * np.arange(n, dtype=np.float64) - n + 1
    return float(2 * np.dot(ordered, weights) / (n * (n - 1)))
