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


class MixingTally:
    """How mixed an epoch's batches are, kept as the batches go by: O(batch) numpy work
    per batch (a sort and a unique of its samples), no Python per sample, so a loader
    keeps it on every batch. `figures` sets the tally against a uniform global shuffle
    of the same split and batch size (`UniformMixing`).
    """

    def __init__(self) -> None:
        self.batches = 0
        self.units_sum = 0
        self.distance_sum = 0.0
        self.distance_batches = 0
        self.gap_sum = 0
        self.gaps = 0
        self._last: int | None = None

    def add(self, samples: np.ndarray, units: np.ndarray) -> None:
        """Count one batch.

        Args:
            samples: the batch's sample ids (time steps, or anchors), in batch order.
            units: the unit each of them lies in.
        """
        samples = np.asarray(samples, dtype=np.int64)
        if samples.size == 0:
            return
        self.batches += 1
        self.units_sum += len(set(np.asarray(units).tolist()))  # a batch's few: np.unique costs 10x
        if samples.size > 1:
            self.distance_sum += _mean_pair_distance(samples)
            self.distance_batches += 1
        steps = np.abs(np.diff(samples))
        self.gap_sum += int(steps.sum())
        self.gaps += int(steps.size)
        if self._last is not None:
            self.gap_sum += abs(int(samples[0]) - self._last)
            self.gaps += 1
        self._last = int(samples[-1])

    def figures(self, uniform: UniformMixing) -> dict[str, float]:
        """The epoch's figures so far beside the uniform expectations (empty before the
        first batch): `distinct_units_per_batch` and `_uniform`, `time_distance` (mean
        |t_i - t_j| in a batch) and `_uniform`, each with its `_ratio`, and `gap_score`:
        the mean |gap| between consecutive samples over its uniform expectation (which
        is the mean pair distance of the split), at most 1.

        Args:
            uniform: the split's uniform expectations.
        """
        if not self.batches:
            return {}
        distinct = self.units_sum / self.batches
        distance = self.distance_sum / self.distance_batches if self.distance_batches else 0.0
        gap = self.gap_sum / self.gaps if self.gaps else 0.0
        return {
            "distinct_units_per_batch": distinct,
            "distinct_units_uniform": uniform.distinct_units,
            "distinct_units_ratio": _ratio(distinct, uniform.distinct_units),
            "time_distance": distance,
            "time_distance_uniform": uniform.time_distance,
            "time_distance_ratio": _ratio(distance, uniform.time_distance),
            "gap_score": min(1.0, _ratio(gap, uniform.time_distance)),
        }


class UniformMixing:
    """What a uniform global shuffle of a split gives, exactly: distinct units per batch
    (`uniform_distinct_units`) and mean time distance in a batch (`uniform_time_distance`,
    also the expected |gap| between consecutive samples). O(n log n) once per split.

    Args:
        unit_sizes: samples of each unit of the split.
        samples: the split's sample ids.
        batch_size: samples per batch.
    """

    def __init__(self, unit_sizes: np.ndarray, samples: np.ndarray, batch_size: int) -> None:
        self.distinct_units = uniform_distinct_units(unit_sizes, batch_size)
        self.time_distance = uniform_time_distance(samples)


def _ratio(value: float, expected: float) -> float:
    return value / expected if expected > 0 else 1.0
