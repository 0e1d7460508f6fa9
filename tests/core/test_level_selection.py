"""Levels picked by value, in the order asked for: the read keeps each level once, sorted
(`AxisPick.indices`), the batch holds them as asked (`AxisPick.places`), as `ds.sel`
gives them whatever order the store keeps; and the rows one take reads to reorder them
(`core.picked_takes`) are the brute-force reorder, whatever the axes around the level
axis and whichever other axes are reordered with it (an area's columns)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.axis_pick import AxisPick
from insitubatch_nodes.core.batch_fields import batch_shape, crop_index
from insitubatch_nodes.core.channels import channel_names
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.level_selection import pick_levels
from insitubatch_nodes.core.memory_bound import plan_memory
from insitubatch_nodes.core.picked_takes import PickedTake, take_picked

DESCENDING = np.array([1000, 850, 700, 500, 250, 100, 50])  # the CDS ERA5 layout


@pytest.mark.parametrize(
    ("wanted", "indices", "places"),
    [
        ([500, 850], (1, 3), (1, 0)),  # ascending values on a descending store
        ([850, 500], (1, 3), (0, 1)),  # the stored order: no reorder
        ([50, 1000, 500], (0, 3, 6), (2, 0, 1)),
        ([500, 500.0, 850], (1, 3), (1, 1, 0)),  # twice, as ds.sel repeats it
    ],
)
def test_the_read_is_sorted_and_the_batch_is_in_the_asked_order(
    wanted: list[float], indices: tuple[int, ...], places: tuple[int, ...]
) -> None:
    pick = pick_levels("z", 1, "pressure_level", DESCENDING, wanted)
    assert pick.indices == indices
    assert pick.places == places
    assert pick.batch_indices == tuple(indices[k] for k in places)
    assert [DESCENDING[i] for i in pick.batch_indices] == [int(v) for v in wanted]
    assert pick.reorders == (places != tuple(range(len(indices))))
    assert pick.order == (places if pick.reorders else ())  # canonical: none when sorted
    layout = VariableLayout((4, 7, 3, 2), (2, 2, 3, 2), "float32", (pick,))
    assert layout.sample_shape == (len(indices), 3, 2)  # a block holds each level once
    assert layout.batch_sample_shape == (len(places), 3, 2)
    assert channel_names("z", layout, 2) == [f"z_{int(v)}" for v in wanted]


def test_an_order_that_is_not_the_picks_places_is_refused() -> None:
    with pytest.raises(ValueError, match=r"order must name each of its 2 kept positions"):
        VariableLayout((4, 7), (2, 2), "float32", (AxisPick(1, (1, 3), order=(0, 2)),))
    with pytest.raises(ValueError, match=r"order must name each of its 2 kept positions"):
        VariableLayout((4, 7), (2, 2), "float32", (AxisPick(1, (1, 3), order=(1, 1)),))


@st.composite
def _reordered_blocks(draw: st.DrawFn) -> tuple[np.ndarray, tuple[AxisPick, ...]]:
    """A block (rows first) and picks on some of its inner axes, each in an order of its
    own (repeats included), the last axis's too."""
    inner = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    rows = draw(st.integers(1, 9))
    block = np.arange(rows * int(np.prod(inner)), dtype=np.int64).reshape(rows, *inner)
    picks = []
    for axis in sorted(draw(st.sets(st.integers(1, len(inner)), min_size=1))):
        kept = inner[axis - 1]
        places = list(draw(st.permutations(range(kept))))
        places += draw(st.lists(st.integers(0, kept - 1), max_size=2))  # repeats
        picks.append(AxisPick(axis, tuple(range(kept)), order=tuple(places)))
    return block, tuple(picks)


def _brute_force(taken: np.ndarray, picks: tuple[AxisPick, ...], lead: int) -> np.ndarray:
    """`taken` (`lead` axes, then a block's inner axes) with each pick's axis put in the
    batch's order by a take along it."""
    for pick in picks:
        taken = np.take(taken, list(pick.places), axis=lead + pick.axis - 1)
    return taken


@settings(max_examples=200, deadline=None)
@given(blocks=_reordered_blocks(), data=st.data())
def test_one_take_puts_every_reordered_axis_in_the_batchs_order(
    blocks: tuple[np.ndarray, tuple[AxisPick, ...]], data: st.DataObject
) -> None:
    """One take (`take_picked`) of a block is its rows with each picked axis put in the
    batch's order by a take along it (numpy's fancy indexing of the block), for any
    reordered axes, the last one included, and any order (repeats included)."""
    block, picks = blocks
    rows = np.asarray(
        data.draw(st.lists(st.integers(0, block.shape[0] - 1), min_size=1, max_size=6)), np.int64
    )
    rows = rows.reshape(-1, data.draw(st.sampled_from([1, rows.size])))  # (n, steps)
    want = _brute_force(block[rows], picks, 2)
    got = take_picked(block, rows, PickedTake(block.shape, picks))
    np.testing.assert_array_equal(got, want)
    out = np.full(want.shape, -1, dtype=block.dtype)
    take_picked(block, rows, PickedTake(block.shape, picks), out=out)
    np.testing.assert_array_equal(out, want)
    shape = batch_shape(rows.shape[0], block.shape, np.arange(rows.shape[1]), (), picks)
    assert shape == want.shape


@pytest.mark.parametrize(
    ("places", "runs"),
    [
        ((5, 6, 7, 8, 9, 0, 1, 2), ((5, 10, 0), (0, 3, 5))),  # an area across the seam
        ((9, 8, 7, 6, 5, 4, 3, 2, 1, 0), None),  # ten runs: one fancy index instead
        ((3, 2, 1, 0), None),  # four: longitudes stored westward
        ((0, 1, 0, 1, 2), ((0, 2, 0), (0, 3, 2))),  # a position twice
    ],
)
def test_a_reordered_last_axis_is_taken_by_runs_or_one_fancy_index(
    places: tuple[int, ...], runs: tuple[tuple[int, int, int], ...] | None
) -> None:
    block = np.arange(6 * 2 * 10, dtype=np.float32).reshape(6, 2, 10)
    pick = AxisPick(2, tuple(range(10)), order=places)
    take = PickedTake(block.shape, (pick,))
    assert take.column_runs() == runs
    rows = np.array([[4], [0], [4]])
    want = block[rows][..., list(places)]
    np.testing.assert_array_equal(take_picked(block, rows, take), want)


@settings(max_examples=200, deadline=None)
@given(blocks=_reordered_blocks(), data=st.data())
def test_a_crop_of_reordered_axes_is_the_crop_of_the_batchs_order(
    blocks: tuple[np.ndarray, tuple[AxisPick, ...]], data: st.DataObject
) -> None:
    """With patches on the last axes, the take crops the batch's grid (the positions in
    the batch's order), whichever axes are reordered, cropped or not."""
    block, picks = blocks
    k = data.draw(st.integers(1, block.ndim - 1))
    # an area never repeats a position of a cropped axis (`core.anchors.patch_grid`)
    picks = tuple(p for p in picks if p.axis < block.ndim - k or len(p.places) == len(p.indices))
    full = _brute_force(block, picks, 1)  # every row's sample in the batch's order
    grid = full.shape[-k:]
    size = tuple(data.draw(st.integers(1, g)) for g in grid)
    n = data.draw(st.integers(1, 4))
    rows = np.asarray(
        data.draw(st.lists(st.integers(0, block.shape[0] - 1), min_size=n, max_size=n))
    )
    origins = np.array(
        [[data.draw(st.integers(0, g - s)) for g, s in zip(grid, size, strict=True)] for _ in rows]
    ).reshape(n, k)
    take = PickedTake(block.shape, picks, size)
    view, flat = take.view(block), take.rows(rows[:, None]).reshape(n, -1)
    index, middle = crop_index(flat, origins, size, view.ndim, np.arange, take.crop_lookups())
    got = view[index]  # (n, steps x folded, *size, *middle)
    if middle:
        got = np.moveaxis(got, list(range(2 + k, 2 + k + middle)), list(range(2, 2 + middle)))
    want = np.stack(
        [
            full[r][(..., *(slice(o, o + s) for o, s in zip(origin, size, strict=True)))]
            for r, origin in zip(rows.tolist(), origins.tolist(), strict=True)
        ]
    )
    np.testing.assert_array_equal(got.reshape(want.shape), want)


def test_the_memory_plan_counts_a_level_asked_twice_in_the_batch() -> None:
    """A block holds level 500 once; a batch asking [500, 850, 500] holds it twice: the
    budget's batch part is counted at the batch's size, so memory stays bounded."""
    pick = pick_levels("z", 1, "pressure_level", DESCENDING, [500, 850, 500])
    layout = VariableLayout((40, 7, 3, 2), (4, 7, 3, 2), "float32", (pick,))
    plan = plan_memory(
        1 << 30, {"z": layout}, batch_size=8, block_samples=4, max_inflight=1, batches_held=2
    )
    assert plan.batch_bytes == 2 * 8 * (3 * 3 * 2) * 4
