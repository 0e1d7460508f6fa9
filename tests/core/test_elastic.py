"""The rest of an epoch dealt again to another number of ranks: what ranks yielded before
a cut plus what the new ranks yield after it is the split once (plus the documented
padding), over chains of resizes, and the normal form a state records stays small."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.elastic import (
    RankCut,
    RestShare,
    deal_rest,
    epoch_rest,
    full_permutation,
    rank_rest,
    redeal,
    rest_target,
    share_samples,
    share_units,
)
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.pool_order import POOL_RAMP, pool_draw, pool_epoch_order
from tests.helpers.strategies import geometries

SEED, EPOCH = 7, 2


@dataclass
class Segment:
    """Ranks drawing part of an epoch: each rank's units, starts and target."""

    units: list[np.ndarray]
    starts: list[np.ndarray]
    target: int
    shares: list[RestShare | None]

    def counts(self, geometry: SampleGeometry) -> list[int]:
        """Samples each rank still has to give."""
        pairs = zip(self.units, self.starts, strict=True)
        return [share_samples(geometry, u, s) for u, s in pairs]


def fresh_segment(
    geometry: SampleGeometry, split: np.ndarray, world: int, partitions: int, b: int, drop: bool
) -> Segment:
    shares = [
        assign_epoch(
            geometry,
            split,
            seed=SEED,
            epoch=EPOCH,
            rank=r,
            world_size=world,
            partitions=partitions,
        )
        for r in range(world)
    ]
    return Segment(
        [a.units for a in shares],
        [np.zeros(a.units.size, dtype=np.int64) for a in shares],
        shares[0].samples_per_rank(b, drop),
        [None] * world,
    )


def draw(
    geometry: SampleGeometry,
    seg: Segment,
    pool: int,
    b: int,
    batches: int | None,
    ramp: int = POOL_RAMP,
    interleave: bool = True,
) -> tuple[list[np.ndarray], list[list[tuple[int, int]]], list[RankCut]]:
    """Every rank's samples up to the cut, its (unit, given) rest and its cut."""
    yielded, rests, cuts = [], [], []
    for r, (units, starts) in enumerate(zip(seg.units, seg.starts, strict=True)):
        order, cursor = pool_draw(
            geometry,
            seed=SEED,
            epoch=EPOCH,
            rank=r,
            units=units,
            starts=starts,
            target=seg.target,
            pool_size=pool,
            batch_size=b,
            ramp=ramp,
            interleave=interleave,
            batches=batches,
        )
        yielded.append(order)
        resident = [(p, g) for p, g in cursor.resident]
        sizes = geometry.unit_sizes(units)
        rests.append(rank_rest(units, starts, sizes, cursor.next_unit, resident))
        cuts.append(RankCut(r, seg.shares[r], cursor.next_unit, tuple(resident)))
    return yielded, rests, cuts


def resized_segment(
    geometry: SampleGeometry,
    split: np.ndarray,
    rests: list[list[tuple[int, int]]],
    cuts: list[RankCut],
    partitions: int,
    world: int,
    b: int,
    drop: bool,
) -> tuple[Segment, list[RestShare]]:
    permutation = full_permutation(geometry, split, SEED, EPOCH)
    rest = epoch_rest(permutation, [pair for r in rests for pair in r])
    shares = deal_rest(geometry, permutation, rest, world)
    # the states' way: from each old rank's cut alone
    kw = {"seed": SEED, "epoch": EPOCH, "partitions": partitions}
    assert redeal(geometry, split, cuts=cuts, world_size=world, **kw) == shares
    # what a state records goes through its plain form
    shares = [RestShare.from_plain(s.to_plain()) for s in shares]
    laid = [share_units(geometry, s, permutation, split) for s in shares]
    counts = [share_samples(geometry, u, s) for u, s in laid]
    return (
        Segment(
            [u for u, _ in laid],
            [s for _, s in laid],
            rest_target(counts, b, drop),
            list(shares),
        ),
        shares,
    )


@settings(max_examples=150, deadline=None)
@given(
    geometries(max_samples=150),
    st.lists(st.integers(1, 4), min_size=2, max_size=4),
    st.integers(0, 10),
    st.integers(1, 9),
    st.integers(1, 12),
    st.booleans(),
    st.integers(0, 3),
    st.booleans(),
    st.data(),
)
def test_samples_before_and_after_resizes_are_the_split_once(
    geometry: SampleGeometry,
    worlds: list[int],
    extra_partitions: int,
    pool: int,
    b: int,
    drop: bool,
    ramp: int,
    interleave: bool,
    data: st.DataObject,
) -> None:
    """Every segment's pool ramps up afresh (`ramp`; 0: none), the re-dealt rests' too,
    with batches interleaved (version 3) or not (version 2)."""
    split = np.arange(geometry.num_units)
    first = worlds[0]
    partitions = first + extra_partitions
    if partitions > split.size:
        return
    seg = fresh_segment(geometry, split, first, partitions, b, drop)
    if seg.target == 0:
        return
    seen: list[np.ndarray] = []
    padding = 0
    for next_world in [*worlds[1:], None]:
        batches = -(-seg.target // b)
        cut = None if next_world is None else data.draw(st.integers(0, batches))
        yielded, rests, cuts = draw(geometry, seg, pool, b, cut, ramp, interleave)
        real_left = sum(seg.counts(geometry))
        drawn = sum(y.size for y in yielded)
        assert all(y.size == yielded[0].size for y in yielded)  # ranks step together
        seen += yielded
        left_after = sum(
            share_samples(geometry, np.array([u]), np.array([g])) for r in rests for u, g in r
        )
        padding += drawn - (real_left - left_after)
        if next_world is None:
            break
        seg, shares = resized_segment(geometry, split, rests, cuts, partitions, next_world, b, drop)
        counts = seg.counts(geometry)
        assert sum(counts) == left_after
        assert max(counts) - min(counts) <= geometry.unit_length  # no unit split
        # the normal form: the resident units and a few around the cursors, whatever came
        # before (never more than every rank's pool and a unit's worth of ranks' spread)
        pieces = sum(len(s.pieces) for s in shares)
        short = int(np.count_nonzero(geometry.unit_sizes(split) < geometry.unit_length))
        assert pieces <= left_after  # never more pieces than samples left
        assert pieces <= short + sum(len(r) for r in rests)
        if seg.target == 0:
            break
    counts = Counter(np.concatenate(seen).tolist())
    if drop:
        assert max(counts.values(), default=1) == 1  # dropping never repeats a sample
    else:
        assert set(counts) == set(range(geometry.num_samples))  # every sample seen
        assert sum(c - 1 for c in counts.values()) == padding  # only padding repeats


@given(geometries(max_samples=120), st.integers(1, 4), st.integers(1, 6), st.integers(1, 10))
def test_a_cut_at_the_start_deals_like_a_fresh_epoch(
    geometry: SampleGeometry, world: int, pool: int, b: int
) -> None:
    """A rest cut before any batch, dealt to W' ranks: the full units are the tail, every
    W'-th from the rank, as a fresh epoch at W' deals them (short units are pieces)."""
    split = np.arange(geometry.num_units)
    if split.size < 2:
        return
    seg = fresh_segment(geometry, split, 1, 1, b, False)
    _, rests, _ = draw(geometry, seg, pool, b, 0)
    permutation = full_permutation(geometry, split, SEED, EPOCH)
    rest = epoch_rest(permutation, rests[0])
    assert rest.tail == 0
    assert all(geometry.unit_sizes(np.array([u]))[0] < geometry.unit_length for u, _ in rest.pieces)
    shares = deal_rest(geometry, permutation, rest, world)
    for r, share in enumerate(shares):
        units, _ = share.units_and_starts(permutation)
        full = units[geometry.unit_sizes(units) == geometry.unit_length]
        assert np.array_equal(full, permutation[r::world])


def test_same_world_size_draws_the_rank_order_of_a_fresh_epoch() -> None:
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((97,), (4,), "float32")})
    split = np.arange(geometry.num_units)
    a = assign_epoch(geometry, split, seed=SEED, epoch=EPOCH, rank=1, world_size=2)
    whole = pool_epoch_order(geometry, a, pool_size=3, batch_size=5, drop_last=False)
    seg = fresh_segment(geometry, split, 2, 2, 5, False)
    yielded, _, _ = draw(geometry, seg, 3, 5, None)
    assert np.array_equal(yielded[1], whole)


def test_a_unit_left_on_two_ranks_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="more than one rank"):
        epoch_rest(np.arange(4), [(1, 0), (1, 2)])
