"""Date splits in the pure core: a date range selects exactly the steps xarray's
`sel(time=slice(first, last))` selects; splits cut by dates never share a step, and no
window or lead of one split reads a step of another (hypothesis, over random time axes,
partial dates, unit lengths and sample specs)."""

from __future__ import annotations

import datetime
import itertools

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.date_manifest import make_date_manifest
from insitubatch_nodes.core.date_ranges import (
    TimeAxis,
    check_increasing,
    check_no_overlap,
    date_instants,
    date_range,
    range_steps,
)
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import SplitManifest
from insitubatch_nodes.core.sample_spec import SampleSpec, leads, window
from tests.helpers.profiles import examples

START = np.datetime64("1999-11-20T00", "ns")


@st.composite
def time_axes(draw: st.DrawFn, max_steps: int = 160) -> TimeAxis:
    """A strictly increasing axis: a regular step (hours to days), some gaps."""
    n = draw(st.integers(1, max_steps))
    step = np.timedelta64(draw(st.sampled_from([1, 3, 6, 24, 30])), "h")
    gaps = np.asarray(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    offsets = np.cumsum(1 + gaps * draw(st.integers(0, 1)))
    return TimeAxis("time", START + offsets * step)


def partial_dates(axis: TimeAxis) -> st.SearchStrategy[str]:
    """Dates at every precision ISO allows, in and around the axis's range."""
    first = axis.dates[0].astype("M8[h]") - np.timedelta64(24 * 40, "h")
    span = int((axis.dates[-1].astype("M8[h]") - first) / np.timedelta64(1, "h")) + 24 * 80
    units = ["Y", "M", "D", "h", "m"]
    return st.builds(
        lambda hours, unit: str((first + np.timedelta64(hours, "h")).astype(f"M8[{unit}]")),
        st.integers(0, span),
        st.sampled_from(units),
    )


def _sel(axis: TimeAxis, first: str, last: str) -> list[int]:
    """The brute force: what xarray's label slicing selects."""
    steps = xr.DataArray(np.arange(axis.dates.size), coords={"time": axis.dates}, dims="time")
    return steps.sel(time=slice(first, last)).values.tolist()


@settings(max_examples=examples(300), deadline=None)
@given(st.data())
def test_a_date_range_selects_the_steps_xarray_selects(data: st.DataObject) -> None:
    axis = data.draw(time_axes())
    first, last = sorted(data.draw(st.lists(partial_dates(axis), min_size=2, max_size=2)))
    try:
        dates = date_range((first, last), "split 'x'")
    except ValueError:  # the last date ends before the first begins: xarray selects nothing
        assert _sel(axis, first, last) == []
        return
    start, stop = range_steps(axis, dates)
    assert list(range(start, stop)) == _sel(axis, first, last)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_date_splits_share_no_step_and_no_window_crosses_a_boundary(data: st.DataObject) -> None:
    axis = data.draw(time_axes(max_steps=120))
    n = axis.dates.size
    chunk = data.draw(st.integers(1, 7))
    unit = chunk * data.draw(st.integers(1, 3))
    layout = VariableLayout((n, 2), (chunk, 2), "float32")
    geometry = SampleGeometry.from_layouts({"v": layout}, unit_length=unit)
    cuts = sorted(data.draw(st.lists(st.integers(1, max(n - 1, 1)), max_size=3, unique=True)))
    bounds = [0, *[c for c in cuts if c < n], n]
    # split k holds the dates of steps [bounds[k], bounds[k+1]), written as text ranges
    text = [str(d) for d in axis.dates.astype("M8[m]")]
    splits = {
        f"s{k}": (text[a], text[b - 1])
        for k, (a, b) in enumerate(itertools.pairwise(bounds))
        if b > a
    }
    manifest = SplitManifest.loads(make_date_manifest(geometry, axis, splits).dumps())
    spec = SampleSpec(
        {
            "x": window(["v"], steps=data.draw(st.integers(1, 3))),
            "y": leads(["v"], data.draw(st.lists(st.integers(1, 4), min_size=1, unique=True))),
        }
    )
    owner = np.full(n, -1)
    for k, name in enumerate(splits):
        for a, b in manifest.step_ranges(name).tolist():
            assert (owner[a:b] == -1).all()  # no step in two splits
            owner[a:b] = k
        assert list(np.flatnonzero(owner == k)) == _sel(axis, *splits[name])
    assert (owner >= 0).all()
    lo, hi = spec.span
    for k, name in enumerate(splits):
        anchors = AnchorSet.for_steps(geometry, manifest.step_ranges(name), spec)
        got = anchors.unit_samples(anchors.units)
        # brute force: every step t+lo .. t+hi exists and belongs to this split
        expected = [
            t
            for t in range(n)
            if t + lo >= 0 and t + hi < n and (owner[t + lo : t + hi + 1] == k).all()
        ]
        assert sorted(got.tolist()) == expected
        assert set(anchors.units.tolist()) <= set(manifest.units(name).tolist())


def test_partial_dates_cover_their_whole_period() -> None:
    assert date_instants("2015", "d") == (np.datetime64("2015"), np.datetime64("2016"))
    start, stop = date_instants("2015-12-31T23", "d")
    assert (start, stop) == (np.datetime64("2015-12-31T23"), np.datetime64("2016-01-01T00"))
    assert date_instants(datetime.date(2016, 2, 29), "d")[1] == np.datetime64("2016-03-01")
    assert date_range("2016", "s").text() == "2016"
    whole = date_range(("1979-01-01", "2015-12-31T23"), "s")
    assert whole.stop == np.datetime64("2016-01-01T00")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1979-13", r"split 'train''s first date is '1979-13', which is not an ISO 8601 date"),
        (("2016", "2015"), r"its last date 2015 ends before its first date 2016 begins"),
        (("1979", "2015", "2016"), r"must be an inclusive \(first, last\) pair of dates"),
        ((1979, 2015), r"must be a date: ISO 8601 text such as '1979'"),
        (
            datetime.datetime(2016, 1, 1, tzinfo=datetime.UTC),
            "carries a time zone; give dates in UTC without one",
        ),
    ],
)
def test_bad_dates_are_refused_naming_what_and_how(value: object, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        date_range(value, "split 'train'")  # type: ignore[arg-type]


def _axis(steps: int = 48) -> tuple[SampleGeometry, TimeAxis]:
    geometry = SampleGeometry.from_layouts({"v": VariableLayout((steps, 2), (4, 2), "float32")})
    return geometry, TimeAxis("time", START + np.arange(steps) * np.timedelta64(6, "h"))


def test_overlapping_empty_and_reserved_splits_are_refused() -> None:
    geometry, axis = _axis()
    with pytest.raises(ValueError, match=r"splits 'train' \(1999-11 \.\. 1999-11-25\) and 'val'"):
        make_date_manifest(
            geometry, axis, {"train": ("1999-11", "1999-11-25"), "val": "1999-11-25"}
        )
    with pytest.raises(
        ValueError,
        match=r"split 'test' \(2001\) holds no step: the time coordinate 'time' runs from "
        r"1999-11-20T00:00 to 1999-12-01T18:00; give dates inside that range",
    ):
        make_date_manifest(geometry, axis, {"train": "1999", "test": "2001"})
    with pytest.raises(ValueError, match="split name 'all' is not allowed"):
        make_date_manifest(geometry, axis, {"all": "1999"})
    with pytest.raises(ValueError, match="splits must map split names to date ranges"):
        make_date_manifest(geometry, axis, {})


def test_bounds_beyond_a_nanosecond_axis_span_select_by_date_not_by_a_wrapped_value() -> None:
    """Nanosecond datetimes end in 2262: a bound like "2580" converted to them wraps (to
    1696), which selected steps that end in 1996 instead of running to the axis's end."""
    dates = np.arange("1990-01-01", "2000-01-01", dtype="M8[D]").astype("M8[ns]")
    axis = TimeAxis("time", dates)
    index = {str(d)[:10]: i for i, d in enumerate(dates.astype("M8[D]"))}
    assert range_steps(axis, date_range(("1995", "2580"), "test")) == (index["1995-01-01"], 3652)
    assert range_steps(axis, date_range(("1700", "9999"), "all")) == (0, 3652)
    assert range_steps(axis, date_range(("2300", "2400"), "later")) == (3652, 3652)
    assert range_steps(axis, date_range(("1066", "1200"), "earlier")) == (0, 0)
    fine = date_range((str(dates[5]), "2300"), "fine")  # a bound to the nanosecond
    check_no_overlap({"train": date_range(("1990", "1990-01-05"), "train"), "test": fine})
    with pytest.raises(ValueError, match="overlap"):
        check_no_overlap({"a": date_range(("1990", "2300"), "a"), "b": fine})


def test_a_time_axis_that_is_not_increasing_is_refused() -> None:
    dates = START + np.array([0, 1, 2, 2, 3]) * np.timedelta64(1, "h")
    with pytest.raises(
        ValueError,
        match=r"'time' is not increasing: step 3 \(1999-11-20T02:00\) comes after step 2 "
        r"\(1999-11-20T02:00\); date splits need a time axis sorted without repeats",
    ):
        check_increasing(TimeAxis("time", dates))
    dates = START + np.array([0, 2, 1]) * np.timedelta64(1, "h")
    with pytest.raises(ValueError, match=r"step 2 .* comes after step 1"):
        check_increasing(TimeAxis("time", dates))
    with pytest.raises(ValueError, match=r"has no date at step 1 \(NaT\)"):
        check_increasing(TimeAxis("time", np.array([START, np.datetime64("NaT")])))


def test_a_date_manifest_records_dates_and_round_trips() -> None:
    geometry, axis = _axis()
    manifest = make_date_manifest(
        geometry,
        axis,
        {"train": ("1999-11-20", "1999-11-25T05"), "val": ("1999-11-25T06", "1999-12")},
    )
    # units of 4 steps (a day): the boundary, 1999-11-25T06, is inside unit 5
    assert manifest.steps == {"train": [[0, 21]], "val": [[21, 48]]}
    assert manifest.splits == {"train": [[0, 6]], "val": [[5, 12]]}  # unit 5 in both
    assert manifest.dates == {
        "train": ["1999-11-20T00:00", "1999-11-25T00:00"],
        "val": ["1999-11-25T06:00", "1999-12-01T18:00"],
    }
    assert manifest.time is not None and manifest.time["first"] == "1999-11-20T00:00"
    assert manifest.rule["dates"]["val"] == ["1999-11-25T06", "1999-12"]
    again = SplitManifest.loads(manifest.dumps())
    assert again == manifest
    assert np.array_equal(again.step_ranges("val"), [[21, 48]])
    assert np.array_equal(again.step_ranges("all"), [[0, 48]])


def test_hand_edited_step_manifests_are_refused() -> None:
    geometry, axis = _axis()
    data = make_date_manifest(geometry, axis, {"train": "1999-11", "val": "1999-12"}).to_json()
    overlapping = {**data, "steps": {"train": [[0, 41]], "val": [[40, 48]]}}
    with pytest.raises(ValueError, match=r"splits 'train' and 'val' overlap: steps \[40, 41\)"):
        SplitManifest.from_json(overlapping)
    wrong_units = {**data, "splits": {"train": [[0, 10]], "val": [[10, 12]]}}
    with pytest.raises(ValueError, match=r"split 'train' lists units \[\[0, 10\]\], but its steps"):
        SplitManifest.from_json(wrong_units)
    past_end = {**data, "steps": {"train": [[0, 40]], "val": [[40, 49]]}}
    with pytest.raises(ValueError, match=r"'steps' of split 'val' range \[40, 49\) ends past"):
        SplitManifest.from_json(past_end)
    missing = {**data, "steps": {"train": [[0, 40]]}}
    with pytest.raises(ValueError, match=r"'steps' must give .* for exactly the splits"):
        SplitManifest.from_json(missing)
