"""Levels picked by value, in the order asked for: the read keeps each level once, sorted
(`AxisPick.indices`), the batch holds them as asked (`AxisPick.places`), as `ds.sel`
gives them whatever order the store keeps; and the rows one take reads to reorder them
(`picked_rows`) are the brute-force reorder, whatever the axes around the level axis."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.batch_fields import batch_shape, picked_rows, picked_view
from insitubatch_nodes.core.channels import channel_names
from insitubatch_nodes.core.geometry import AxisPick, VariableLayout
from insitubatch_nodes.core.level_selection import pick_levels
from insitubatch_nodes.core.memory_bound import plan_memory

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
    layout = VariableLayout((4, 7, 3, 2), (2, 2, 3, 2), "float32", pick)
    assert layout.sample_shape == (len(indices), 3, 2)  # a block holds each level once
    assert layout.batch_sample_shape == (len(places), 3, 2)
    assert channel_names("z", layout, 2) == [f"z_{int(v)}" for v in wanted]


def test_an_order_that_is_not_the_picks_places_is_refused() -> None:
    with pytest.raises(ValueError, match=r"order must name each of its 2 kept positions"):
        VariableLayout((4, 7), (2, 2), "float32", AxisPick(1, (1, 3), order=(0, 2)))
    with pytest.raises(ValueError, match=r"order must name each of its 2 kept positions"):
        VariableLayout((4, 7), (2, 2), "float32", AxisPick(1, (1, 3), order=(1, 1)))


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_picked_rows_take_the_levels_in_the_batchs_order(data: st.DataObject) -> None:
    """One take of `picked_rows` from the block's `picked_view` is the block's rows with the
    picked axis put in the batch's order by a take along it, for any axes before and after
    the picked one and any order (repeats included)."""
    before = tuple(data.draw(st.lists(st.integers(1, 3), max_size=2)))
    after = tuple(data.draw(st.lists(st.integers(1, 4), max_size=2)))
    kept = data.draw(st.integers(1, 5))
    axis = 1 + len(before)
    block_rows = data.draw(st.integers(1, 9))
    block = np.arange(block_rows * np.prod((*before, kept, *after)), dtype=np.int64)
    block = block.reshape(block_rows, *before, kept, *after)
    places = data.draw(st.permutations(range(kept)))
    places += data.draw(st.lists(st.integers(0, kept - 1), max_size=3))  # repeats
    pick = AxisPick(axis, tuple(range(kept)), order=tuple(places))
    rows = np.asarray(
        data.draw(st.lists(st.integers(0, block_rows - 1), min_size=1, max_size=6)), np.int64
    )
    rows = rows.reshape(-1, data.draw(st.sampled_from([1, rows.size])))  # (n, steps)
    want = np.take(block[rows], list(places), axis=rows.ndim + axis - 1)
    got = np.take(picked_view(block, pick), picked_rows(rows, block.shape, pick), axis=0)
    np.testing.assert_array_equal(got, want)
    shape = batch_shape(rows.shape[0], block.shape, np.arange(rows.shape[1]), (), pick)
    assert shape == want.shape


def test_the_memory_plan_counts_a_level_asked_twice_in_the_batch() -> None:
    """A block holds level 500 once; a batch asking [500, 850, 500] holds it twice: the
    budget's batch part is counted at the batch's size, so memory stays bounded."""
    pick = pick_levels("z", 1, "pressure_level", DESCENDING, [500, 850, 500])
    layout = VariableLayout((40, 7, 3, 2), (4, 7, 3, 2), "float32", pick)
    plan = plan_memory(
        1 << 30, {"z": layout}, batch_size=8, block_samples=4, max_inflight=1, batches_held=2
    )
    assert plan.batch_bytes == 2 * 8 * (3 * 3 * 2) * 4
