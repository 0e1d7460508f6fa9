"""Permutation, rank partition and draw order: pure functions of (seed, epoch, rank)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from insitubatch_nodes.core.canonical_partitions import default_partition_count
from insitubatch_nodes.core.draw_order import rank_epoch_order
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch, chunk_permutation
from tests.helpers.strategies import geometries


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


def _round_robin_units(
    geometry: SampleGeometry, split: np.ndarray, epoch: int, rank: int, world_size: int
) -> np.ndarray:
    """The deal before canonical partitions, spelled out: every W-th unit of the epoch's
    order (full units permuted, short ones last) from `rank`, as a set."""
    sizes = geometry.unit_sizes(split)
    full, short = split[sizes == geometry.unit_length], split[sizes < geometry.unit_length]
    order = np.concatenate([chunk_permutation(full, 3, epoch), short])
    return order[rank::world_size]


@given(geometries(max_samples=150), st.integers(1, 6), st.integers(1, 4), st.integers(0, 3))
def test_partitions_a_multiple_of_the_world_size_deal_as_round_robin(
    geometry: SampleGeometry, world_size: int, multiple: int, epoch: int
) -> None:
    split = np.arange(geometry.num_units)
    partitions = world_size * multiple
    if partitions > split.size:
        with pytest.raises(ValueError, match=r"canonical_partitions|fewer than world_size"):
            assign_epoch(
                geometry,
                split,
                seed=3,
                epoch=epoch,
                rank=0,
                world_size=world_size,
                partitions=partitions,
            )
        return
    for rank in range(world_size):
        a = assign_epoch(
            geometry,
            split,
            seed=3,
            epoch=epoch,
            rank=rank,
            world_size=world_size,
            partitions=partitions,
        )
        legacy = _round_robin_units(geometry, split, epoch, rank, world_size)
        # the same units in the same order (short units scattered by the same seeded rule)
        same_c = assign_epoch(
            geometry,
            split,
            seed=3,
            epoch=epoch,
            rank=rank,
            world_size=world_size,
            partitions=world_size,
        )
        assert np.array_equal(a.units, same_c.units)
        assert np.array_equal(np.sort(a.units), np.sort(legacy))
        full = a.units[geometry.unit_sizes(a.units) == geometry.unit_length]
        assert np.array_equal(full, legacy[geometry.unit_sizes(legacy) == geometry.unit_length])
        assert (a.min_rank_samples, a.max_rank_samples) == (
            same_c.min_rank_samples,
            same_c.max_rank_samples,
        )


@given(
    geometries(max_samples=200),
    st.integers(1, 7),
    st.integers(0, 40),
    st.integers(1, 20),
    st.booleans(),
    st.integers(0, 3),
)
def test_any_partition_count_deals_each_unit_once_with_equal_batches(
    geometry: SampleGeometry,
    world_size: int,
    extra: int,
    batch_size: int,
    drop_last: bool,
    epoch: int,
) -> None:
    split = np.arange(geometry.num_units)
    partitions = world_size + extra
    if partitions > split.size:
        return
    assignments = [
        assign_epoch(
            geometry,
            split,
            seed=3,
            epoch=epoch,
            rank=r,
            world_size=world_size,
            partitions=partitions,
        )
        for r in range(world_size)
    ]
    dealt = np.concatenate([a.units for a in assignments])
    assert np.array_equal(np.sort(dealt), split)  # each unit exactly once
    counts = [int(geometry.unit_sizes(a.units).sum()) for a in assignments]
    assert counts == [a.rank_samples for a in assignments]
    # ranks differ by at most the units of one partition (ceil(units / C) units)
    per_partition = -(-split.size // partitions) * geometry.unit_length
    assert max(counts) - min(counts) <= per_partition
    target = assignments[0].samples_per_rank(batch_size, drop_last)
    for a in assignments:
        assert a.samples_per_rank(batch_size, drop_last) == target
        if target:
            order = rank_epoch_order(
                geometry, a, block_chunks=2, batch_size=batch_size, drop_last=drop_last
            )
            assert order.size == target
    later = [
        assign_epoch(
            geometry,
            split,
            seed=3,
            epoch=epoch + 1,
            rank=r,
            world_size=world_size,
            partitions=partitions,
        ).rank_samples
        for r in range(world_size)
    ]
    assert later == counts  # shares, so padding, the same every epoch


@given(st.integers(1, 5000))
def test_default_partition_count_suits_common_gpu_counts(units: int) -> None:
    c = default_partition_count(units)
    assert 1 <= c <= units
    if units >= 48:
        assert all(c % w == 0 for w in (1, 2, 3, 4, 6, 8, 12, 16, 24, 48))
        assert c > units - 48
    else:
        assert c == units  # one unit per partition: any world size deals round-robin


def test_the_state_records_c_and_an_older_state_resumes_only_when_dealt_alike() -> None:
    from insitubatch_nodes.nodes.chunk_permute import ChunkPermuteNode

    geometry = SampleGeometry.from_layouts({"a": VariableLayout((200,), (2,), "float32")})
    units = np.arange(geometry.num_units)  # 100 units: default C = 96
    node = ChunkPermuteNode(geometry, units, seed=1, rank=1, world_size=4)
    assert node.get_state()["config"]["partitions"] == 96
    node.reset(None)
    tickets = [next(node).unit for _ in range(3)]
    state = node.get_state()
    legacy = {**state, "config": {k: v for k, v in state["config"].items() if k != "partitions"}}
    again = ChunkPermuteNode(geometry, units, seed=1, rank=1, world_size=4)
    again.reset(legacy)  # 4 divides 96: the deal before partitions, so it resumes
    assert next(again).unit == next(node).unit
    assert tickets == list(
        assign_epoch(geometry, units, seed=1, epoch=0, rank=1, world_size=4).units[:3]
    )
    five = ChunkPermuteNode(geometry, units, seed=1, rank=1, world_size=5)
    five_state = five.get_state()
    five_legacy = {
        **five_state,
        "config": {k: v for k, v in five_state["config"].items() if k != "partitions"},
    }
    with pytest.raises(ValueError, match="canonical_partitions=5"):
        ChunkPermuteNode(geometry, units, seed=1, rank=1, world_size=5).reset(five_legacy)
    other = ChunkPermuteNode(geometry, units, seed=1, rank=1, world_size=4, canonical_partitions=48)
    with pytest.raises(ValueError, match="partitions=96"):
        other.reset(state)
    with pytest.raises(ValueError, match="canonical_partitions=101"):
        ChunkPermuteNode(geometry, units, world_size=4, canonical_partitions=101)
