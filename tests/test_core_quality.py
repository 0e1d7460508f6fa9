"""The shuffle-quality figures the demo reports separate good shuffles from bad ones."""

from __future__ import annotations

import numpy as np

from insitubatch_nodes.core.quality import chunk_diversity, gap_score


def test_gap_score_ranks_storage_order_below_a_uniform_shuffle() -> None:
    n = 10_000
    assert gap_score(np.arange(n)) < 0.01
    assert gap_score(np.random.default_rng(0).permutation(n)) > 0.95


def test_chunk_diversity_counts_distinct_units_per_batch() -> None:
    sequential = [np.arange(i, i + 8) for i in range(0, 64, 8)]
    assert chunk_diversity(sequential, unit_length=8, num_units=8) == 1 / 8
    spread = [np.arange(i, 64, 8) for i in range(8)]
    assert chunk_diversity(spread, unit_length=8, num_units=8) == 1.0


def test_uniform_expectations_match_a_simulated_global_shuffle() -> None:
    from insitubatch_nodes.core.quality import (
        distinct_units_per_batch,
        mean_time_distance,
        uniform_distinct_units,
        uniform_time_distance,
    )

    n, length, batch = 960, 24, 32
    rng = np.random.default_rng(1)
    batches = [rng.permutation(n).reshape(-1, batch) for _ in range(40)]
    flat = [b for epoch in batches for b in epoch]
    simulated = distinct_units_per_batch(flat, length)
    expected = uniform_distinct_units(np.full(n // length, length), batch)
    assert abs(simulated - expected) < 0.05 * expected
    distance = mean_time_distance(flat)
    assert abs(distance - uniform_time_distance(np.arange(n))) < 0.02 * n
    assert uniform_time_distance(np.arange(4)) == (3 + 2 + 1 + 2 + 1 + 1) / 6
    assert uniform_distinct_units(np.array([5]), 3) == 1.0
