"""The shuffle-quality figures the demo reports separate good shuffles from bad ones."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


@settings(max_examples=50, deadline=None)
@given(
    data=st.lists(st.lists(st.integers(0, 200), min_size=1, max_size=12), min_size=1, max_size=8),
    unit_length=st.integers(1, 9),
)
def test_the_running_tally_is_the_slow_definitions(data: list[list[int]], unit_length: int) -> None:
    from insitubatch_nodes.core.quality import (
        MixingTally,
        UniformMixing,
        distinct_units_per_batch,
        mean_time_distance,
    )

    batches = [np.array(b) for b in data]
    tally = MixingTally()
    for batch in batches:
        tally.add(batch, batch // unit_length)
    uniform = UniformMixing(np.full(23, unit_length), np.arange(23 * unit_length), 4)
    figures = tally.figures(uniform)
    assert figures["distinct_units_per_batch"] == pytest.approx(
        distinct_units_per_batch(batches, unit_length)
    )
    assert figures["time_distance"] == pytest.approx(mean_time_distance(batches))
    order = np.concatenate(batches)
    gap = np.abs(np.diff(order)).mean() if order.size > 1 else 0.0
    assert figures["gap_score"] == pytest.approx(min(1.0, gap / uniform.time_distance))
    assert MixingTally().figures(uniform) == {}
