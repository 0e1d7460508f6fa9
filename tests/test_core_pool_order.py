"""The chunk-pool shuffle's order: a pure function of (seed, epoch, rank, pool size), every
sample once per epoch per rank, ranks stepping together, and batches mixed over the pool."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import geometries

from insitubatch_nodes.core.draw_order import rank_epoch_order
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.pool_order import pool_epoch_order, pool_take, pool_units


@given(
    geometries(max_samples=120),
    st.integers(1, 4),
    st.integers(1, 12),
    st.integers(1, 20),
    st.booleans(),
    st.integers(0, 3),
)
def test_pool_order_covers_each_rank_once_and_ranks_step_together(
    geometry: SampleGeometry,
    world_size: int,
    pool_size: int,
    batch_size: int,
    drop_last: bool,
    epoch: int,
) -> None:
    split = np.arange(geometry.num_units)
    if split.size < world_size:
        return
    assignments = [
        assign_epoch(geometry, split, seed=5, epoch=epoch, rank=r, world_size=world_size)
        for r in range(world_size)
    ]
    target = assignments[0].samples_per_rank(batch_size, drop_last)
    orders = []
    for a in assignments:
        order = pool_epoch_order(
            geometry, a, pool_size=pool_size, batch_size=batch_size, drop_last=drop_last
        )
        assert order.size == target
        again = pool_epoch_order(
            geometry, a, pool_size=pool_size, batch_size=batch_size, drop_last=drop_last
        )
        assert np.array_equal(order, again)  # a pure function
        counts = Counter(order.tolist())
        real = geometry.unit_samples(a.units)
        if drop_last:
            assert max(counts.values(), default=1) == 1
            assert set(counts) <= set(real.tolist())
        else:
            assert set(counts) == set(real.tolist())
            assert sum(c - 1 for c in counts.values()) == target - real.size
        orders.append(order)
    if not drop_last:
        assert np.array_equal(np.unique(np.concatenate(orders)), np.arange(geometry.num_samples))


def test_the_order_changes_with_the_epoch_and_seed_only_as_keyed() -> None:
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((480,), (8,), "float32")})
    split = np.arange(geometry.num_units)

    def order(seed: int, epoch: int) -> np.ndarray:
        a = assign_epoch(geometry, split, seed=seed, epoch=epoch, rank=0, world_size=1)
        return pool_epoch_order(geometry, a, pool_size=6, batch_size=16, drop_last=False)

    assert np.array_equal(order(1, 2), order(1, 2))
    assert not np.array_equal(order(1, 2), order(1, 3))
    assert not np.array_equal(order(1, 2), order(2, 2))


def test_a_pool_mixes_batches_far_better_than_blocks_of_the_same_units() -> None:
    """24 steps per unit, batch 32: the block shuffle's batches touch about 8 units, the
    pool's nearly one unit per sample."""
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((8760,), (24,), "float32")})
    a = assign_epoch(geometry, np.arange(geometry.num_units), seed=0, epoch=0, rank=0, world_size=1)
    block = rank_epoch_order(geometry, a, block_chunks=8, batch_size=32, drop_last=True)
    pool = pool_epoch_order(geometry, a, pool_size=78, batch_size=32, drop_last=True)

    def distinct(order: np.ndarray) -> float:
        return float(np.mean([np.unique(b // 24).size for b in order.reshape(-1, 32)])) / 32

    assert distinct(block) < 0.3
    assert distinct(pool) > 0.6


def test_pool_take_draws_what_is_asked_within_what_each_unit_has() -> None:
    remaining = np.array([5, 0, 3, 9])
    counts = pool_take(0, 0, 0, 7, remaining, 10)
    assert counts.sum() == 10 and np.all(counts <= remaining)
    assert np.array_equal(counts, pool_take(0, 0, 0, 7, remaining, 10))
    with pytest.raises(ValueError, match="fewer than"):
        pool_take(0, 0, 0, 7, remaining, 18)


def test_pool_units_follows_the_window_and_holds_a_batch() -> None:
    assert pool_units(1 << 30, 11 << 20, 24, 32) == 93
    assert pool_units(1, 11 << 20, 24, 32) == 3  # a batch's units plus one, at least
    assert pool_units(1, 100, 1, 32) == 33
    with pytest.raises(ValueError, match="positive sizes"):
        pool_units(0, 1, 1, 1)
