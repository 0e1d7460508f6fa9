"""Split manifests cut by dates: `{"train": ("1979", "2015"), "val": "2016"}` -> steps.

Weather models are trained, validated and tested on periods of years, and a boundary set
by hand in step indices is where validation data leaks into training. So a split is given
as dates (`core.date_ranges`), found in the store's time coordinate, and kept as the
[start, stop) steps it holds. Splits are exact to the step: a chunk that straddles a date
boundary is read by both splits, but each uses only its own steps as anchors, and THE
RULE of `core.anchors` keeps every window and lead inside its split's steps. The manifest
records what was asked (`rule["dates"]`), the dates each split holds (`dates`: its first
and last step's), and the coordinate it was cut on (`time`: name, steps, first and last
date, and a digest of every date), so that a manifest is refused on a store whose time
axis has changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from insitubatch_nodes.core.calendars import PROLEPTIC
from insitubatch_nodes.core.cf_time import date_unit
from insitubatch_nodes.core.date_ranges import (
    DateRange,
    RangeLike,
    TimeAxis,
    check_increasing,
    check_no_overlap,
    date_range,
    range_steps,
)
from insitubatch_nodes.core.fingerprint import digest
from insitubatch_nodes.core.geometry import SampleGeometry
from insitubatch_nodes.core.manifest import ALL_SPLIT, SplitManifest, units_to_ranges

DATE_RULE = (
    "each split holds the steps whose dates lie from the start of its first date to the "
    "end of its last, both at the precision written ('2015' is all of 2015), as "
    "xarray's ds.sel(time=slice(first, last)) selects them"
)
STEP_ANCHOR_RULE = (
    "a sample anchored at time t whose offsets span [lo, hi] (0 included) belongs to a split "
    "only if every step t+lo .. t+hi lies in one contiguous run of that split's steps; "
    "anchors nearer a run's edge are left out (core.anchors)"
)


def time_record(axis: TimeAxis) -> dict[str, Any]:
    """What a manifest keeps of the time coordinate it was cut on: its name, step count,
    first and last date, its calendar when numpy's is not it, and a digest of every date
    (to the microsecond, and of the calendar: the same counts in another calendar are
    other dates). A record made before calendars is the same: numpy's calendar adds
    nothing.

    Args:
        axis: the decoded time coordinate.
    """
    first, last = axis.text(axis.dates[[0, -1]], date_unit(axis.dates))
    micro = np.asarray(axis.dates).astype("M8[us]").astype("<i8").tobytes()
    record = {"coordinate": axis.name, "steps": int(axis.dates.size), "first": first, "last": last}
    if axis.calendar != PROLEPTIC:  # numpy's calendar is the one a record names none for
        record["calendar"] = axis.calendar
        micro = axis.calendar.encode() + micro
    return {**record, "digest": digest(micro)}


def time_differences(recorded: Mapping[str, Any], axis: TimeAxis) -> str | None:
    """How the time coordinate a manifest was cut on differs from `axis`, in words; None
    when they are the same.

    Args:
        recorded: the manifest's `time` field (`time_record`).
        axis: the store's time coordinate now.
    """
    now = time_record(axis)
    if recorded.get("digest") == now["digest"]:
        return None
    was, is_now = recorded.get("calendar", PROLEPTIC), now.get("calendar", PROLEPTIC)
    calendars = f" in the {was!r} calendar, not {is_now!r}" if was != is_now else ""
    return (
        f"the manifest's dates were cut on time coordinate {recorded.get('coordinate')!r} "
        f"({recorded.get('steps')} steps, {recorded.get('first')} .. {recorded.get('last')})"
        f"{calendars}, but this store's {now['coordinate']!r} holds other dates "
        f"({now['steps']} steps, {now['first']} .. {now['last']})"
    )


def make_date_manifest(
    geometry: SampleGeometry, axis: TimeAxis, splits: Mapping[str, RangeLike]
) -> SplitManifest:
    """A manifest whose splits are the steps of the given date ranges.

    Args:
        geometry: the store's variables and unit grid (its `unit_length` is the manifest's).
        axis: the decoded time coordinate, one date per step (`ZarrSource.time_axis()`).
        splits: split name -> an inclusive `(first, last)` pair of dates, or one date for
            its whole period, e.g. `{"train": ("1979-01-01", "2015-12-31T23"), "val":
            "2016", "test": ("2017", "2018")}`; dates are ISO 8601 text at any precision
            ('1979', '2015-12', '2015-12-31T23'), `datetime`s or numpy datetime64s, in UTC,
            in the axis's calendar ("2015-02-30" is a day of `360_day`).
    """
    if not isinstance(splits, Mapping) or not splits:
        raise ValueError(
            f"splits must map split names to date ranges, e.g. {{'train': ('1979', '2015'), "
            f"'val': '2016'}}; got {splits!r}"
        )
    if axis.dates.size != geometry.num_samples:
        raise ValueError(
            f"the time coordinate {axis.name!r} has {axis.dates.size} dates but the variables "
            f"have {geometry.num_samples} steps along axis 0; select variables on that time axis"
        )
    for name in splits:
        if not isinstance(name, str) or not name or name == ALL_SPLIT:
            raise ValueError(
                f"split name {name!r} is not allowed: give a non-empty str other than "
                f"{ALL_SPLIT!r} (which always means every step)"
            )
    check_increasing(axis)
    ranges = {
        name: date_range(value, f"split {name!r}", axis.calendar) for name, value in splits.items()
    }
    check_no_overlap(ranges)
    steps = {name: _steps_of(axis, name, dates) for name, dates in ranges.items()}
    unit = date_unit(axis.dates)
    held = {name: axis.text(axis.dates[[a, b - 1]], unit) for name, (a, b) in steps.items()}
    units = {}
    for name, (a, b) in steps.items():  # the units the split's steps touch
        first, last = geometry.unit_of(np.array([a, b - 1], dtype=np.int64)).tolist()
        units[name] = units_to_ranges(np.arange(first, last + 1, dtype=np.int64))
    return SplitManifest(
        num_samples=geometry.num_samples,
        unit_length=geometry.unit_length,
        layouts=dict(geometry.variables),
        splits=units,
        steps={name: [[a, b]] for name, (a, b) in steps.items()},
        dates=held,
        time=time_record(axis),
        phase=geometry.phase,
        rule={
            "dates": {name: [r.first, r.last] for name, r in ranges.items()},
            "date_rule": DATE_RULE,
            "anchors": STEP_ANCHOR_RULE,
        },
    )


def _steps_of(axis: TimeAxis, name: str, dates: DateRange) -> tuple[int, int]:
    start, stop = range_steps(axis, dates)
    if stop <= start:
        first, last = axis.text(axis.dates[[0, -1]], date_unit(axis.dates))
        raise ValueError(
            f"split {name!r} ({dates.text()}) holds no step: the time coordinate "
            f"{axis.name!r} runs from {first} to {last}; give dates inside that range"
        )
    return start, stop
