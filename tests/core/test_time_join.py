"""Stores joined on time by value (`core.time_join`), against `xr.merge`'s alignment:
the joined dates are xarray's, each store's map (its origin and its runs) points every
joined step at that date in the store, holes in any store included, and dates that differ
under join='exact' are refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.date_ranges import TimeAxis
from insitubatch_nodes.core.step_runs import stored_steps
from insitubatch_nodes.core.time_join import check_join_policy, join_times

START = np.datetime64("2020-01-01T00", "ns")
STEP = np.timedelta64(6, "h")


def axis(steps: np.ndarray) -> TimeAxis:
    return TimeAxis("time", START + steps.astype(np.int64) * STEP)


def merged_time(axes: list[TimeAxis], join: str) -> np.ndarray:
    """The time xarray's merge keeps for datasets with these dates."""
    datasets = [
        xr.Dataset({f"v{i}": ("time", np.zeros(a.dates.size))}, coords={"time": a.dates})
        for i, a in enumerate(axes)
    ]
    return xr.merge(datasets, join=join).time.values


@st.composite
def store_steps(draw: st.DrawFn) -> list[np.ndarray]:
    """Two or three stores' steps (6-hourly from one start): each a run from its own first
    step, some with steps missing."""
    stores = []
    for _ in range(draw(st.integers(2, 3))):
        first = draw(st.integers(0, 12))
        steps = np.arange(first, first + draw(st.integers(1, 40)))
        if draw(st.booleans()) and steps.size > 2:
            holes = draw(st.sets(st.integers(1, steps.size - 2), max_size=3))
            steps = np.delete(steps, sorted(holes))
        stores.append(steps)
    return stores


@settings(max_examples=200, deadline=None)
@given(store_steps())
def test_an_inner_join_keeps_xarray_dates_and_maps_each_store_onto_them(
    stores: list[np.ndarray],
) -> None:
    """The joined axis is `xr.merge(join="inner")`'s, holes in any store included, and
    each store's map (origin, runs) gives at every joined step the store's step of that
    date: one run unless the store holds a date inside the shared period another lacks,
    each later run jumping over such dates."""
    axes = [axis(steps) for steps in stores]
    names = [f"store{i}" for i in range(len(stores))]
    expected = merged_time(axes, "inner")
    if expected.size == 0:
        with pytest.raises(ValueError, match="share no date"):
            join_times(axes, names, "inner")
        return
    joined = join_times(axes, names, "inner")
    assert np.array_equal(joined.axis.dates, expected)
    everywhere = np.arange(expected.size)
    for a, origin, lost, runs in zip(axes, joined.origins, joined.lost, joined.runs, strict=True):
        assert origin is not None
        assert np.array_equal(a.dates[stored_steps(everywhere, origin, runs)], expected)
        assert lost == a.dates.size - expected.size
        kept = np.flatnonzero(np.isin(a.dates, expected))
        assert len(runs) == int(np.count_nonzero(np.diff(kept) != 1))


@settings(max_examples=100, deadline=None)
@given(store_steps())
def test_an_exact_join_takes_equal_dates_only(stores: list[np.ndarray]) -> None:
    """join='exact' takes the stores when xarray's exact merge does, and refuses naming the
    first step where two stores differ."""
    axes = [axis(steps) for steps in stores]
    names = [f"store{i}" for i in range(len(stores))]
    try:
        expected = merged_time(axes, "exact")
    except ValueError:
        with pytest.raises(ValueError, match="join='exact' needs the same dates"):
            join_times(axes, names, "exact")
        return
    joined = join_times(axes, names, "exact")
    assert np.array_equal(joined.axis.dates, expected)
    assert joined.origins == tuple(0 for _ in axes)


def test_refusals_name_the_stores_and_dates() -> None:
    pressure, surface = axis(np.arange(0, 8)), axis(np.arange(2, 10))
    with pytest.raises(ValueError) as refused:
        join_times([pressure, surface], ["pl.zarr", "sfc.zarr"], "exact")
    text = str(refused.value)
    assert "step 0 is 2020-01-01T00:00 in pl.zarr but 2020-01-01T12:00 in sfc.zarr" in text
    assert "join='inner'" in text


def test_a_hole_in_one_store_is_a_jump_in_the_other() -> None:
    """The surface store lacks step 4: the pressure store's map jumps from its step 3
    to its step 5 at joined step 4; the surface store keeps one run."""
    pressure, holed = axis(np.arange(0, 8)), axis(np.delete(np.arange(0, 8), 4))
    joined = join_times([pressure, holed], ["pl.zarr", "sfc.zarr"], "inner")
    assert joined.origins == (0, 0) and joined.lost == (1, 0)
    assert joined.runs == (((4, 5),), ())


def test_a_static_store_joins_by_grid_alone() -> None:
    """A store without a time axis has no origin and loses nothing."""
    joined = join_times([axis(np.arange(5)), None], ["pl.zarr", "static.zarr"], "inner")
    assert joined.origins == (0, None) and joined.lost == (0, 0)
    with pytest.raises(ValueError, match="none of the joined stores"):
        join_times([None, None], ["a", "b"], "exact")


def test_calendars_must_agree_and_policies_are_named() -> None:
    noleap = TimeAxis("time", START + np.arange(3) * STEP, "noleap")
    with pytest.raises(ValueError, match="'noleap' calendar"):
        join_times([axis(np.arange(3)), noleap], ["a", "b"], "exact")
    with pytest.raises(ValueError, match="join='outer' is not a way"):
        check_join_policy("outer")
