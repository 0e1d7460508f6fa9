"""How a training epoch deals its short units (`core.short_unit_deal`, `DEAL_VERSION`): the ranks'
shares differ by at most one unit's samples, so no rank pads by more than one unit, with
any number of short units; and the deal of version 1, which states saved without a deal
version were made with, is still the one it was."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.draw_order import rank_epoch_order
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch, chunk_permutation
from insitubatch_nodes.core.seeding import rng_for
from insitubatch_nodes.core.short_unit_deal import (
    DEAL_VERSION,
    deals_like_version_1,
    rank_sample_counts,
)


def stride_2_test_split() -> AnchorSet:
    """The anchors the loader deals for `stride=2` on 115 hourly steps chunked 5, split
    "test" of the fractions 0.1/0.1/0.8 (steps 25 .. 114): units of 10 steps holding 5
    anchors each, but for the split's edges, which hold 2 (unit 2) and 3 (unit 11)."""
    geometry = SampleGeometry.from_layouts(
        {"t2m": VariableLayout((115, 3, 4), (5, 3, 4), "float32")}, unit_length=10
    )
    return AnchorSet(geometry, None, np.arange(26, 115, 2, dtype=np.int64), full_unit=5)


def test_two_short_units_on_three_ranks_leave_no_rank_a_unit_behind() -> None:
    """The case hypothesis found: 8 full units dealt 3, 3, 2 and two short ones. Version 1
    gave the short units the last two positions (ranks 2, then 0), so the shares were 18,
    15 and 12 and rank 2 padded 6 samples, more than a unit's 5."""
    anchors = stride_2_test_split()
    units = anchors.units
    assert anchors.unit_sizes(units).tolist() == [2] + [5] * 8 + [3]
    counts = rank_sample_counts(anchors, units, 3)
    assert counts.tolist() == [15, 15, 15]  # the short units (3, 2) both to rank 2
    assert rank_sample_counts(anchors, units, 3, deal=1).tolist() == [18, 15, 12]
    assert not deals_like_version_1(anchors, units, 3, None)
    for epoch in range(3):
        shares = [
            assign_epoch(anchors, units, seed=3, epoch=epoch, rank=r, world_size=3)
            for r in range(3)
        ]
        assert [int(anchors.unit_sizes(a.units).sum()) for a in shares] == counts.tolist()
        assert sorted(np.concatenate([a.units for a in shares]).tolist()) == units.tolist()
        assert {11, 2} <= set(shares[2].units.tolist())


@st.composite
def split_units_of_any_size(draw: st.DrawFn) -> AnchorSet:
    """A split whose units hold any number of samples up to a full unit's, many short:
    each unit's anchors are the first steps of its chunk."""
    length = draw(st.integers(2, 8))
    sizes = draw(
        st.lists(st.one_of(st.just(length), st.integers(1, length)), min_size=1, max_size=60)
    )
    geometry = SampleGeometry.from_layouts(
        {"a": VariableLayout((len(sizes) * length,), (length,), "float32")}
    )
    anchors = np.concatenate(
        [u * length + np.arange(n, dtype=np.int64) for u, n in enumerate(sizes)]
    )
    return AnchorSet(geometry, None, anchors)


@given(
    split_units_of_any_size(),
    st.integers(1, 8),
    st.integers(1, 12),
    st.booleans(),
    st.integers(0, 3),
    st.data(),
)
def test_shares_differ_by_at_most_one_unit_and_padding_never_exceeds_one(
    anchors: AnchorSet,
    world_size: int,
    batch_size: int,
    drop_last: bool,
    epoch: int,
    data: st.DataObject,
) -> None:
    units = anchors.units
    if units.size < world_size:
        return
    # round-robin (one partition per unit, or W dividing C), and any C in [W, units]
    multiples = [world_size * m for m in range(1, units.size // world_size + 1)]
    partitions = data.draw(
        st.one_of(st.sampled_from([None, *multiples]), st.integers(world_size, units.size))
    )
    length = anchors.unit_length
    shares = [
        assign_epoch(
            anchors,
            units,
            seed=5,
            epoch=epoch,
            rank=r,
            world_size=world_size,
            partitions=partitions,
        )
        for r in range(world_size)
    ]
    assert sorted(np.concatenate([a.units for a in shares]).tolist()) == units.tolist()
    counts = [int(anchors.unit_sizes(a.units).sum()) for a in shares]
    assert counts == [a.rank_samples for a in shares]
    full = [int(np.count_nonzero(anchors.unit_sizes(a.units) == length)) for a in shares]
    c = units.size if partitions is None else partitions
    if c % world_size == 0 or c == units.size:  # full units dealt round-robin
        assert max(full) - min(full) <= 1
        assert max(counts) - min(counts) <= length
    else:  # the short units never widen the partitions' own spread past a unit
        assert max(counts) - min(counts) <= max(1, max(full) - min(full)) * length
    target = shares[0].samples_per_rank(batch_size, drop_last)
    for a in shares:
        assert a.samples_per_rank(batch_size, drop_last) == target
        if target == 0:
            continue
        order = rank_epoch_order(
            anchors, a, block_chunks=2, batch_size=batch_size, drop_last=drop_last
        )
        assert order.size == target
        padded = sum(n - 1 for n in Counter(order.tolist()).values())
        if drop_last:
            assert padded == 0
        else:
            assert padded == target - a.rank_samples
            if c % world_size == 0 or c == units.size:
                assert padded <= length  # at most one unit's worth per rank


def legacy_units(
    anchors: AnchorSet, units: np.ndarray, epoch: int, rank: int, world_size: int, c: int
) -> np.ndarray:
    """Version 1's deal, spelled out: the full units permuted, then the short ones in unit
    order, position i to rank (i mod C) mod W; the rank's short units then moved, one by
    one, to seeded places in its share."""
    sizes = anchors.unit_sizes(units)
    full, short = units[sizes == anchors.unit_length], units[sizes < anchors.unit_length]
    order = np.concatenate([chunk_permutation(full, 5, epoch), short])
    owners = (np.arange(order.size) % c) % world_size
    mine = order[owners == rank].tolist()
    shorts = int(np.count_nonzero(owners[full.size :] == rank))
    if not shorts:
        return np.array(mine, dtype=np.int64)
    rng = rng_for(5, "ragged-slot", epoch)
    placed = mine[:-shorts]
    for unit in mine[-shorts:]:
        placed.insert(int(rng.integers(len(placed) + 1)), unit)
    return np.array(placed, dtype=np.int64)


@given(split_units_of_any_size(), st.integers(1, 8), st.integers(0, 3), st.data())
def test_version_1_deals_as_it_always_did(
    anchors: AnchorSet, world_size: int, epoch: int, data: st.DataObject
) -> None:
    units = anchors.units
    if units.size < world_size:
        return
    c = data.draw(st.integers(world_size, units.size))
    alike = deals_like_version_1(anchors, units, world_size, c)
    for rank in range(world_size):
        old = assign_epoch(
            anchors,
            units,
            seed=5,
            epoch=epoch,
            rank=rank,
            world_size=world_size,
            partitions=c,
            deal=1,
        )
        assert (
            old.units.tolist() == legacy_units(anchors, units, epoch, rank, world_size, c).tolist()
        )
        new = assign_epoch(
            anchors, units, seed=5, epoch=epoch, rank=rank, world_size=world_size, partitions=c
        )
        if alike:  # a state saved without a version resumes alike under either
            assert new.units.tolist() == old.units.tolist()
            assert new.max_rank_samples == old.max_rank_samples


def test_one_short_unit_dealt_round_robin_is_where_version_1_put_it() -> None:
    """With round-robin and one short unit (the array's ragged end, the common case) the
    rank holding the fewest samples, the lowest of them, is the next position's: both
    versions deal alike, so states saved without a version need none."""
    for steps in range(57, 200, 7):
        geometry = SampleGeometry.from_layouts({"a": VariableLayout((steps,), (4,), "float32")})
        units = np.arange(geometry.num_units)
        for world_size in range(1, 9):
            if units.size >= world_size:
                assert deals_like_version_1(geometry, units, world_size, world_size)


def test_an_unknown_deal_version_is_refused() -> None:
    anchors = stride_2_test_split()
    with pytest.raises(ValueError, match=rf"deal version 7.*deals versions 1 and {DEAL_VERSION}"):
        rank_sample_counts(anchors, anchors.units, 3, deal=7)
