"""Strides, frequencies and gaps in the pure core, against brute force: the anchors are
the split's valid anchors (THE RULE on the spec's offsets scaled by the stride) that fall
on the stride or frequency and whose span crosses no gap larger than max_gap; and no
window or lead leaves the split."""

from __future__ import annotations

import datetime

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.sample_spec import SampleSpec, leads, window
from insitubatch_nodes.core.time_steps import (
    duration,
    every_kth,
    on_frequency,
    regular_step,
    steps_per,
    without_gaps,
)

START = datetime.datetime(2000, 1, 1)


@st.composite
def hourly_with_gaps(draw: st.DrawFn) -> np.ndarray:
    """An hourly axis from 2000-01-01T00 with some hours missing."""
    n = draw(st.integers(2, 150))
    missing = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    hours = [0, *(h for h in range(1, n) if not missing[h])]
    return np.datetime64("2000-01-01T00", "h") + np.asarray(hours) * np.timedelta64(1, "h")


def _spec(draw: st.DrawFn) -> SampleSpec:
    return SampleSpec(
        {
            "x": window(["v"], steps=draw(st.integers(1, 3)), stride=draw(st.integers(1, 2))),
            "y": leads(["v"], draw(st.lists(st.integers(1, 3), min_size=1, unique=True))),
        }
    )


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_strided_anchors_are_the_brute_force_ones(data: st.DataObject) -> None:
    n = data.draw(st.integers(1, 150))
    stride = data.draw(st.integers(1, 8))
    chunk = data.draw(st.integers(1, 6))
    geometry = SampleGeometry.from_layouts({"v": VariableLayout((n, 2), (chunk, 2), "float32")})
    spec = _spec(data.draw).scaled(stride)
    a = data.draw(st.integers(0, n - 1))
    b = data.draw(st.integers(a + 1, n))
    anchors = AnchorSet.for_steps(geometry, np.array([[a, b]]), spec, allowed=every_kth(n, stride))
    lo, hi = spec.span
    expected = [t for t in range(n) if t % stride == 0 and a <= t + lo and t + hi < b]
    got = anchors.unit_samples(anchors.units)
    assert sorted(got.tolist()) == expected
    for group in spec.groups.values():  # every step read is inside [a, b)
        steps = got[:, None] + np.asarray(group.offsets)[None, :]
        assert ((steps >= a) & (steps < b)).all()
    assert np.all(anchors.unit_sizes(anchors.units) <= anchors.unit_length)


@settings(max_examples=200, deadline=None)
@given(hourly_with_gaps(), st.sampled_from([1, 2, 3, 6, 12]), st.integers(1, 4), st.data())
def test_frequency_and_max_gap_are_the_brute_force_ones(
    dates: np.ndarray, hours: int, gap: int, data: st.DataObject
) -> None:
    n = dates.size
    frequency = np.timedelta64(hours, "h")
    on = on_frequency(dates, frequency)
    as_python = [START + datetime.timedelta(hours=int(h)) for h in (dates - dates[0]).astype(int)]
    assert on.tolist() == [
        (d - as_python[0]) % datetime.timedelta(hours=hours) == datetime.timedelta(0)
        for d in as_python
    ]
    spec = _spec(data.draw).scaled(hours)
    lo, hi = spec.span
    kept = without_gaps(dates, (lo, hi), np.timedelta64(gap, "h"))
    expected = [
        t + lo >= 0
        and t + hi < n
        and all(
            as_python[i + 1] - as_python[i] <= datetime.timedelta(hours=gap)
            for i in range(t + lo, t + hi)
        )
        for t in range(n)
    ]
    assert kept.tolist() == expected


def test_steps_per_frequency_needs_a_whole_number_of_steps() -> None:
    hourly = np.datetime64("2000-01-01T00") + np.arange(48) * np.timedelta64(1, "h")
    assert steps_per(np.timedelta64(6, "h"), hourly, "time") == 6
    three = np.datetime64("2000-01-01T00") + np.arange(48) * np.timedelta64(3, "h")
    with pytest.raises(
        ValueError,
        match=r"frequency 4h is not a whole number of the time coordinate 'time''s steps of "
        r"3h; give a multiple of 3h",
    ):
        steps_per(np.timedelta64(4, "h"), three, "time")
    gappy = np.concatenate([hourly[:10], hourly[20:]])
    assert regular_step(gappy) == np.timedelta64(1, "h")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("6h", np.timedelta64(6, "h")),
        ("1d", np.timedelta64(1, "D")),
        (" 30 min", np.timedelta64(30, "m")),
        ("2 days", np.timedelta64(2, "D")),
        (datetime.timedelta(hours=6), np.timedelta64(6 * 3600 * 10**6, "us")),
        (np.timedelta64(3, "h"), np.timedelta64(3, "h")),
    ],
)
def test_durations_as_users_write_them(value: object, expected: np.timedelta64) -> None:
    assert duration(value, "frequency") == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("6 hrs and more", r"frequency is '6 hrs and more': write a whole number and a unit"),
        ("6M", r"frequency is '6M': write a whole number and a unit"),
        ("0h", "give a duration longer than zero"),
        (6, r"frequency must be a duration such as '6h'"),
        # numpy's unit-less timedelta64 takes whatever unit it meets: 6 hours against an
        # hourly axis, 6 ns against a nanosecond one
        (np.timedelta64(6), r"frequency is numpy.timedelta64\(6\) with no unit"),
    ],
)
def test_bad_durations_are_refused(value: object, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        duration(value, "frequency")  # type: ignore[arg-type]
