"""Permutation, rank partition and draw order: pure functions of (seed, epoch, rank)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import geometries

from insitubatch_nodes.core.draw_order import rank_epoch_order
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch, chunk_permutation


@given(st.integers(1, 300), st.integers(0, 2**32), st.integers(0, 50))
def test_permutation_is_a_pure_function_of_seed_and_epoch(n: int, seed: int, epoch: int) -> None:
    units = np.arange(n) * 3
    first = chunk_permutation(units, seed, epoch)
    assert np.array_equal(first, chunk_permutation(units[::-1], seed, epoch))
    assert np.array_equal(np.sort(first), units)


def test_epochs_and_seeds_change_the_order() -> None:
    units = np.arange(200)
    base = chunk_permutation(units, 0, 0)
    assert not np.array_equal(base, chunk_permutation(units, 0, 1))
    assert not np.array_equal(base, chunk_permutation(units, 1, 0))


@given(
    geometries(max_samples=120),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 20),
    st.booleans(),
    st.integers(0, 3),
)
def test_ranks_cover_the_split_and_step_together(
    geometry: SampleGeometry,
    world_size: int,
    block_chunks: int,
    batch_size: int,
    drop_last: bool,
    epoch: int,
) -> None:
    split = np.arange(geometry.num_units)
    if split.size < world_size:
        with pytest.raises(ValueError, match="fewer than world_size"):
            assign_epoch(geometry, split, seed=3, epoch=epoch, rank=0, world_size=world_size)
        return
    assignments = [
        assign_epoch(geometry, split, seed=3, epoch=epoch, rank=r, world_size=world_size)
        for r in range(world_size)
    ]
    # disjoint units covering the split
    dealt = np.concatenate([a.units for a in assignments])
    assert np.array_equal(np.sort(dealt), split)
    target = assignments[0].samples_per_rank(batch_size, drop_last)
    orders = []
    for a in assignments:
        if target == 0:
            continue
        order = rank_epoch_order(
            geometry, a, block_chunks=block_chunks, batch_size=batch_size, drop_last=drop_last
        )
        assert order.size == target  # every rank yields the same count, so the same batches
        real = geometry.unit_samples(a.units)
        counts = Counter(order.tolist())
        if drop_last:
            assert max(counts.values()) == 1  # trimming never repeats a sample
        else:
            assert set(counts) == set(real.tolist())  # all of this rank's samples
            repeats = sum(c - 1 for c in counts.values())
            assert repeats == target - real.size  # padding is the only repetition
        orders.append(order)
    if not drop_last and orders:
        union = np.unique(np.concatenate(orders))
        assert np.array_equal(union, np.arange(geometry.num_samples))
    if drop_last:
        assert target % batch_size == 0
        assert target > min(a.rank_samples for a in assignments) - batch_size
    later = assign_epoch(geometry, split, seed=3, epoch=epoch + 1, rank=0, world_size=world_size)
    assert later.samples_per_rank(batch_size, drop_last) == target  # same steps every epoch


def test_single_rank_without_drop_last_is_exactly_once() -> None:
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((53, 2), (4, 2), "float32")})
    a = assign_epoch(geometry, np.arange(geometry.num_units), seed=0, epoch=0, rank=0, world_size=1)
    order = rank_epoch_order(geometry, a, block_chunks=3, batch_size=5, drop_last=False)
    assert sorted(order.tolist()) == list(range(53))
    assert not np.array_equal(order, np.arange(53))  # actually shuffled


def test_block_draws_mix_samples_across_the_units_of_a_block() -> None:
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((400,), (10,), "float32")})
    a = assign_epoch(geometry, np.arange(40), seed=0, epoch=0, rank=0, world_size=1)
    order = rank_epoch_order(geometry, a, block_chunks=4, batch_size=8, drop_last=False)
    first_batch_units = {int(i) // 10 for i in order[:8]}
    assert len(first_batch_units) >= 3
    assert first_batch_units <= set(a.units[:4].tolist())


@pytest.mark.parametrize(("rank", "world_size"), [(-1, 2), (2, 2), (0, 0)])
def test_bad_rank_is_named(rank: int, world_size: int) -> None:
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((10,), (1,), "float32")})
    with pytest.raises(ValueError, match=r"rank must be|world_size must be"):
        assign_epoch(geometry, np.arange(10), seed=0, epoch=0, rank=rank, world_size=world_size)
