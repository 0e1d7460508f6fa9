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
