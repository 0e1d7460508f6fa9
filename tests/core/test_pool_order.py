"""The chunk-pool shuffle's order: a pure function of (seed, epoch, rank, pool size, ramp),
every sample once per epoch per rank, ranks stepping together, batches mixed over the
pool, a first batch that waits only for its own units, batches interleaved within (version
3) over version 2's draws, and no interleave being version 2's order (and with no ramp,
version 1's)."""

from __future__ import annotations

import hashlib
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.draw_order import rank_epoch_order
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.pool_order import (
    batch_interleave,
    pool_draw,
    pool_epoch_order,
    pool_take,
    pool_units,
    unit_draw,
)
from insitubatch_nodes.core.quality import gap_score
from insitubatch_nodes.core.seeding import rng_for
from tests.helpers.profiles import examples
from tests.helpers.strategies import geometries


@given(
    geometries(max_samples=120),
    st.integers(1, 4),
    st.integers(1, 12),
    st.integers(1, 20),
    st.booleans(),
    st.integers(0, 3),
    st.integers(0, 3),
    st.booleans(),
)
def test_pool_order_covers_each_rank_once_and_ranks_step_together(
    geometry: SampleGeometry,
    world_size: int,
    pool_size: int,
    batch_size: int,
    drop_last: bool,
    epoch: int,
    ramp: int,
    interleave: bool,
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
    kw = {"pool_size": pool_size, "batch_size": batch_size, "drop_last": drop_last}
    kw |= {"interleave": interleave}
    for a in assignments:
        order = pool_epoch_order(geometry, a, ramp=ramp, **kw)
        assert order.size == target
        again = pool_epoch_order(geometry, a, ramp=ramp, **kw)
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


@settings(max_examples=examples(60), deadline=None)
@given(
    geometries(max_samples=150),
    st.integers(1, 12),
    st.integers(1, 20),
    st.integers(1, 3),
    st.integers(0, 2),
)
def test_the_pool_ramps_up_to_p_as_the_rule_says(
    geometry: SampleGeometry, pool_size: int, batch_size: int, ramp: int, epoch: int
) -> None:
    """Before batch b the pool holds what the batch needs, then (b + 1) * ramp batches'
    samples or P units, whichever is less, and not a unit more: the reads a batch waits
    for follow from the settings alone."""
    split = np.arange(geometry.num_units)
    a = assign_epoch(geometry, split, seed=2, epoch=epoch, rank=0, world_size=1)
    target = a.samples_per_rank(batch_size, False)
    sizes = geometry.unit_sizes(a.units)
    zeros = np.zeros(a.units.size, dtype=np.int64)
    for b in range(-(-target // batch_size)):
        kw = {"seed": 2, "epoch": epoch, "rank": 0, "units": a.units, "starts": zeros}
        kw |= {"target": target, "pool_size": pool_size, "batch_size": batch_size}
        _, before = pool_draw(geometry, ramp=ramp, batches=b, **kw)
        _, after = pool_draw(geometry, ramp=ramp, batches=b + 1, **kw)
        drawn = min(b * batch_size, a.rank_samples)
        real = min(batch_size, a.rank_samples - drawn)
        entered = after.next_unit
        held = int(sizes[:entered].sum()) - drawn  # the pool's samples as batch b drew
        units = len(before.resident) + entered - before.next_unit
        enough = held >= real and (units >= pool_size or held >= (b + 1) * ramp * batch_size)
        assert enough or entered == a.units.size
        if entered > before.next_unit:  # the last unit to enter was needed
            last = int(sizes[entered - 1])
            assert held - last < real or (
                units - 1 < pool_size and held - last < (b + 1) * ramp * batch_size
            )


def test_the_first_batch_waits_for_its_own_units_only() -> None:
    """24 steps per unit, batch 32, P = 78: version 1 read 78 units before batch 0; the
    ramp reads 2, and the pool holds P units after about P * 24 / (2 * 32) batches (its
    units are about half drawn)."""
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((8760,), (24,), "float32")})
    a = assign_epoch(geometry, np.arange(geometry.num_units), seed=0, epoch=0, rank=0, world_size=1)
    kw = {"seed": 0, "epoch": 0, "rank": 0, "units": a.units, "pool_size": 78}
    kw |= {"starts": np.zeros(a.units.size, dtype=np.int64), "target": a.rank_samples}
    _, at_once = pool_draw(geometry, batch_size=32, ramp=0, batches=1, **kw)
    _, ramped = pool_draw(geometry, batch_size=32, ramp=1, batches=1, **kw)
    assert at_once.next_unit == 78 and ramped.next_unit == 2
    units = []
    for b in range(60):
        _, before = pool_draw(geometry, batch_size=32, ramp=1, batches=b, **kw)
        _, after = pool_draw(geometry, batch_size=32, ramp=1, batches=b + 1, **kw)
        units.append(len(before.resident) + after.next_unit - before.next_unit)
    full = units.index(78)
    assert 78 * 24 / (4 * 32) < full < 78 * 24 / 32
    assert all(u < 78 for u in units[:full]) and all(u == 78 for u in units[full:])


def _digests(**kw: int | bool) -> list[str]:
    """Digests of what three ranks draw in one epoch of a small store."""
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((1003,), (7,), "float32")})
    split = np.arange(geometry.num_units)
    digests = []
    for rank in range(3):
        a = assign_epoch(geometry, split, seed=3, epoch=1, rank=rank, world_size=3)
        order = pool_epoch_order(geometry, a, pool_size=9, batch_size=10, drop_last=False, **kw)
        digests.append(hashlib.sha256(order.astype("<i8").tobytes()).hexdigest()[:16])
    return digests


def test_without_a_ramp_nor_interleave_the_order_is_version_1s() -> None:
    """What version 1 (pool filled to P before the first batch) drew for three ranks: its
    states resume exactly in a loader with `pool_ramp=0, pool_interleave=False`."""
    want = ["1c17972e5d9344cf", "739ca8b094142d39", "43c90072f9b51bef"]
    assert _digests(ramp=0, interleave=False) == want


def test_without_interleave_the_order_is_version_2s() -> None:
    """What version 2 (the ramp, batches grouped by unit) drew for three ranks: its states
    resume exactly in a loader with `pool_interleave=False`; the default order is another."""
    want = ["5c6ce3ed57c12a19", "79686dcdee881e9c", "b2dd6e908a3d253d"]
    assert _digests(interleave=False) == want
    assert not set(_digests()) & set(want)


@given(
    st.integers(0, 2**32),
    st.integers(0, 1000),
    st.integers(0, 10**6),
    st.integers(0, 5),
)
def test_a_unit_draw_is_its_keyed_permutation_whatever_its_size(
    seed: int, epoch: int, unit: int, size: int
) -> None:
    """One-sample units skip the generator (issue 33): their draw is still the keyed
    permutation's, value and dtype, so no order changes."""
    drawn = unit_draw(seed, epoch, unit, size)
    want = rng_for(seed, "unit-draw", epoch, unit).permutation(size)
    assert drawn.dtype == want.dtype and drawn.tolist() == want.tolist()


@settings(max_examples=60, deadline=None)
@given(
    geometries(max_samples=150),
    st.integers(1, 3),
    st.integers(1, 12),
    st.integers(1, 20),
    st.booleans(),
    st.integers(0, 2),
    st.integers(0, 2),
    st.data(),
)
def test_each_batch_is_version_2s_batch_interleaved(
    geometry: SampleGeometry,
    world_size: int,
    pool_size: int,
    batch_size: int,
    drop_last: bool,
    ramp: int,
    epoch: int,
    data: st.DataObject,
) -> None:
    """Version 3 draws version 2's batches (the same samples, the same pool cursor after
    any batch) and yields batch b's real samples permuted by `batch_interleave` of b
    alone, its padding after them; a re-dealt rest (units entering part-drawn) too."""
    split = np.arange(geometry.num_units)
    if split.size < world_size:
        return
    rank = data.draw(st.integers(0, world_size - 1))
    a = assign_epoch(geometry, split, seed=4, epoch=epoch, rank=rank, world_size=world_size)
    sizes = geometry.unit_sizes(a.units)
    starts = np.array([data.draw(st.integers(0, int(s))) for s in sizes], dtype=np.int64)
    real = int(sizes.sum() - starts.sum())
    target = data.draw(st.integers(max(real, 1), real + batch_size)) if sizes.any() else 0
    if target == 0 or (target > real and int(sizes[-1]) == 0):
        return  # nothing to draw, or padding from an empty last unit
    kw = {"seed": 4, "epoch": epoch, "rank": rank, "units": a.units, "starts": starts}
    kw |= {"target": target, "pool_size": pool_size, "batch_size": batch_size, "ramp": ramp}
    grouped, grouped_cursor = pool_draw(geometry, interleave=False, **kw)
    mixed, mixed_cursor = pool_draw(geometry, **kw)
    assert grouped_cursor == mixed_cursor
    assert grouped.size == mixed.size == target
    for b, start in enumerate(range(0, target, batch_size)):
        want = grouped[start : start + batch_size]
        batch_real = min(want.size, max(0, real - start))
        order = batch_interleave(4, epoch, rank, b, want.size, batch_real)
        assert np.array_equal(mixed[start : start + batch_size], want[order])
    assert np.array_equal(mixed[real:], grouped[real:])  # the padding stays last
    cut = data.draw(st.integers(0, -(-target // batch_size)))
    _, cursor = pool_draw(geometry, batches=cut, **kw)
    _, grouped_at_cut = pool_draw(geometry, batches=cut, interleave=False, **kw)
    assert cursor == grouped_at_cut


def test_interleaved_batches_mix_any_slice_of_them_as_well_as_the_whole() -> None:
    """An ERA5-like year (8,760 hourly steps, 24 per chunk, batch 32, P from a 1 GiB
    window of 11 MB units): grouped by unit, neighbouring samples of a batch are often the
    same unit's, and the gap between them scores well below a uniform shuffle's;
    interleaved, as well as a uniform shuffle (`core.quality.gap_score`)."""
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((8760,), (24,), "float32")})
    a = assign_epoch(geometry, np.arange(geometry.num_units), seed=0, epoch=0, rank=0, world_size=1)
    pool_size = pool_units(1 << 30, 4 * 24 * 121 * 240 * 4, 24, 32)
    kw = {"pool_size": pool_size, "batch_size": 32, "drop_last": True}
    grouped = pool_epoch_order(geometry, a, interleave=False, **kw)
    mixed = pool_epoch_order(geometry, a, **kw)
    assert np.array_equal(np.sort(grouped.reshape(-1, 32)), np.sort(mixed.reshape(-1, 32)))
    assert gap_score(mixed) >= 0.95 > gap_score(grouped)


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
