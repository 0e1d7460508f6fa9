"""The area's selection, pure: for any grid (latitudes ascending, descending or unordered;
longitudes in [0, 360), [-180, 180) or any span) and any box, the grid points kept are
exactly those the rule says, in the stored latitude order and eastward from the west edge
in longitude; the picks read them sorted and give them in that order; and the one take
that reorders a block (`core.picked_takes`) is numpy's fancy indexing of the stored
array at the box's rows and columns."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.area import EDGE_TOLERANCE, Area, select_area
from insitubatch_nodes.core.axis_pick import AxisPick
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.picked_takes import PickedTake, take_picked

degrees = st.floats(-720, 720, allow_nan=False).map(lambda x: round(x, 1))
latitudes = st.floats(-90, 90, allow_nan=False).map(lambda x: round(x, 1))


def _inside(area: Area, lat: float, lon: float) -> bool:
    """The rule as the issue writes it, one point at a time."""
    if not area.south - EDGE_TOLERANCE <= lat <= area.north + EDGE_TOLERANCE:
        return False
    if area.east - area.west >= 360:
        return True
    east_of_west = (lon - area.west) % 360
    return (
        east_of_west <= (area.east - area.west) % 360 + EDGE_TOLERANCE
        or east_of_west >= 360 - EDGE_TOLERANCE
    )


@st.composite
def _grids(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    step = draw(st.sampled_from([0.25, 1.0, 7.5, 10.0, 30.0]))
    lat = np.arange(-90.0, 90.0 + step / 2, step)
    lat = draw(st.sampled_from([lat, lat[::-1], np.asarray(draw(st.permutations(lat[:12])))]))
    start = draw(st.sampled_from([0.0, -180.0, 12.5]))
    lon = start + np.arange(0.0, 360.0, step)
    return lat, lon


@st.composite
def _areas(draw: st.DrawFn) -> Area:
    south = draw(latitudes)
    north = draw(latitudes.filter(lambda x: x >= south))
    west = draw(degrees)
    east = draw(st.one_of(degrees, st.just(west + 360.0), st.just(west)))
    return Area(north, west, south, east)


@settings(max_examples=300, deadline=None)
@given(_grids(), _areas())
def test_the_points_kept_are_the_rule_in_the_batchs_order(
    grid: tuple[np.ndarray, np.ndarray], area: Area
) -> None:
    lat, lon = grid
    rows, columns = area.rows(lat), area.columns(lon)
    assert rows.tolist() == [i for i, v in enumerate(lat) if _inside(area, v, area.west)]
    kept = {j for j, v in enumerate(lon) if _inside(area, area.south, v)}
    assert sorted(columns.tolist()) == sorted(kept)
    east = np.mod(lon[columns] - area.west, 360)
    east = np.where(east >= 360 - EDGE_TOLERANCE, 0, east)
    assert (np.diff(east) >= 0).all()  # eastward from the west edge
    if not rows.size or not columns.size:
        with pytest.raises(ValueError, match="holds no grid point"):
            select_area(area, lat, lon)
        return
    selection = select_area(area, lat, lon)
    np.testing.assert_array_equal(selection.latitudes, lat[rows])
    np.testing.assert_array_equal(selection.longitudes, lon[columns])
    rows_pick, columns_pick = selection.picks(1, 2)
    assert list(rows_pick.batch_indices) == rows.tolist()
    assert list(columns_pick.indices) == sorted(columns.tolist())  # the read: sorted
    assert list(columns_pick.batch_indices) == columns.tolist()  # the batch: eastward


@settings(max_examples=200, deadline=None)
@given(_grids(), _areas(), st.integers(1, 3), st.data())
def test_a_block_taken_through_the_area_is_the_stored_arrays_fancy_index(
    grid: tuple[np.ndarray, np.ndarray], area: Area, levels: int, data: st.DataObject
) -> None:
    """A block holds the box sorted (rows, then columns as the read keeps them); one take
    of it is `stored[steps][:, :, rows][..., columns]` (numpy's own fancy indexing), the
    level axis in between, in any order asked for."""
    lat, lon = grid
    lat, lon = lat[:20], lon[:24]  # a part of the grid, to stay small
    rows, columns = area.rows(lat), area.columns(lon)
    assume(rows.size and columns.size)  # a box of no point is refused: tested above
    steps = 5
    stored = np.arange(steps * levels * lat.size * lon.size).reshape(
        steps, levels, lat.size, lon.size
    )
    level_order = tuple(data.draw(st.permutations(range(levels))))
    level_pick = AxisPick(1, tuple(range(levels)), order=level_order)
    rows_pick, columns_pick = select_area(area, lat, lon).picks(2, 3)
    layout = VariableLayout(
        stored.shape, stored.shape, "int64", (level_pick, rows_pick, columns_pick)
    )
    block = stored[:, :, list(rows_pick.indices)][..., list(columns_pick.indices)]  # as read
    assert block.shape[1:] == layout.sample_shape
    take = PickedTake(block.shape, layout.reordering)
    drawn = np.asarray(data.draw(st.lists(st.integers(0, steps - 1), min_size=1, max_size=4)))
    got = take_picked(block, drawn, take) if layout.reordering else block[drawn]
    want = stored[drawn][:, list(level_order)][:, :, rows][..., columns]
    np.testing.assert_array_equal(got, want)
    assert got.shape[1:] == layout.batch_sample_shape


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ((10, 0, 20, 30), r"north 10\.0 < south 20\.0"),
        ((10, 0, 20), r"4 finite numbers"),
        ((10, 0, float("nan"), 30), r"4 finite numbers"),
        ("60,-10,x,30", r"4 finite numbers"),
        (60, r"must be \(north, west, south, east\)"),
    ],
)
def test_bad_boxes_are_refused_by_name(given: object, error: str) -> None:
    with pytest.raises((ValueError, TypeError), match=error):
        Area.parse(given)
    assert Area.parse("60, -10, 35, 30") == Area(60, -10, 35, 30)
