"""Which steps may be anchors: every k-th step, a frequency, no gap inside a window.

Most models train 6-hourly out of an hourly archive: `stride=6` keeps every 6th step
(steps counted from the store's first) as an anchor, `frequency="6h"` the steps whose
date is the store's first date plus a whole number of 6 hours. Windows and leads are
then counted in those units: `window(steps=2)` is t-6h, t and `leads([1])` is t+6h, as in
anemoi's `frequency` with `multistep` and `rollout`. Reads are planned as before (the
read plan asks for the chunks of `anchor + offset`, whatever the offsets are).

Windows, leads and strides count steps of the stored axis, not hours: where the time
coordinate has a gap (missing steps), a window of 2 spans the gap. `max_gap` drops the
anchors whose window or leads span two consecutive dates further apart than it.

Each rule is a bool per step (`AnchorSet.for_steps(allowed=...)`), pure and vectorised.
"""

from __future__ import annotations

import datetime
import re

import numpy as np

from insitubatch_nodes.core.cf_time import step_text

_DURATION = re.compile(r"^\s*(?P<count>\d+)\s*(?P<unit>[A-Za-z]+)\s*$")
_UNITS = {
    **dict.fromkeys(("s", "sec", "second", "seconds"), "s"),
    **dict.fromkeys(("min", "minute", "minutes"), "m"),
    **dict.fromkeys(("h", "hour", "hours"), "h"),
    **dict.fromkeys(("d", "day", "days"), "D"),
    **dict.fromkeys(("w", "week", "weeks"), "W"),
}


def duration(value: str | datetime.timedelta | np.timedelta64, what: str) -> np.timedelta64:
    """A positive length of time as a user writes it: "6h", "1d", "30min", a
    `datetime.timedelta` or a numpy timedelta64.

    Args:
        value: the duration.
        what: its setting's name, for the message ("frequency").
    """
    if isinstance(value, str):
        found = _DURATION.match(value)
        unit = _UNITS.get(found["unit"].lower()) if found else None
        if found is None or unit is None:
            raise ValueError(
                f"{what} is {value!r}: write a whole number and a unit, e.g. '6h', '1d', "
                f"'30min' or '3600s' (units: s, min, h, d, w)"
            )
        result = np.timedelta64(int(found["count"]), unit)
    elif isinstance(value, np.timedelta64) and np.datetime_data(value.dtype)[0] == "generic":
        raise ValueError(
            f"{what} is numpy.timedelta64({int(value.astype(np.int64))}) with no unit: numpy "
            f"would read it in whatever unit it meets (hours on an hourly axis, nanoseconds "
            f"on another); give one, e.g. numpy.timedelta64(6, 'h') or '6h'"
        )
    elif isinstance(value, datetime.timedelta | np.timedelta64) and not isinstance(value, bool):
        result = np.timedelta64(value)
    else:
        raise TypeError(
            f"{what} must be a duration such as '6h', a datetime.timedelta or a numpy "
            f"timedelta64; got {value!r} ({type(value).__name__})"
        )
    if np.isnat(result) or result <= np.timedelta64(0, "s"):
        raise ValueError(f"{what} is {value!r}: give a duration longer than zero")
    return result


def regular_step(dates: np.ndarray) -> np.timedelta64:
    """The time coordinate's usual step: the most common difference of two neighbours
    (gaps are rarer than steps).

    Args:
        dates: the coordinate, increasing, at least two dates.
    """
    differences, counts = np.unique(np.diff(dates), return_counts=True)
    return differences[np.argmax(counts)]


def every_kth(num_steps: int, stride: int) -> np.ndarray:
    """Steps 0, k, 2k, ... of the stored axis.

    Args:
        num_steps: the axis's length.
        stride: k, an int >= 1.
    """
    return np.arange(num_steps, dtype=np.int64) % stride == 0


def steps_per(frequency: np.timedelta64, dates: np.ndarray, name: str) -> int:
    """How many of the coordinate's steps make one `frequency`: the unit of windows and
    leads. An error when it is not a whole number.

    Args:
        frequency: the anchors' frequency.
        dates: the time coordinate (increasing).
        name: the coordinate's name, for the message.
    """
    if dates.size < 2:
        return 1
    step = regular_step(dates)
    whole, left = divmod(frequency.astype("m8[us]"), step.astype("m8[us]"))
    if left != np.timedelta64(0, "us") or whole < 1:
        raise ValueError(
            f"frequency {_text(frequency)} is not a whole number of the time coordinate "
            f"{name!r}'s steps of {_text(step)}; give a multiple of {_text(step)}"
        )
    return int(whole)


def on_frequency(dates: np.ndarray, frequency: np.timedelta64) -> np.ndarray:
    """Steps whose date is the first date plus a whole number of `frequency`.

    Args:
        dates: the time coordinate.
        frequency: the anchors' frequency.
    """
    since = (dates - dates[0]).astype("m8[us]").astype(np.int64)
    return since % int(frequency.astype("m8[us]").astype(np.int64)) == 0


def without_gaps(dates: np.ndarray, span: tuple[int, int], max_gap: np.timedelta64) -> np.ndarray:
    """Steps t whose steps t+lo .. t+hi all exist and hold no two neighbouring dates
    further apart than `max_gap`.

    Args:
        dates: the time coordinate (increasing).
        span: (lo, hi), the lowest and highest offset of a sample (0 included).
        max_gap: the largest difference allowed between two neighbouring dates.
    """
    lo, hi = span
    n = dates.size
    jumps = np.concatenate([[0], np.cumsum(np.diff(dates) > max_gap)])
    allowed = np.zeros(n, dtype=bool)
    first, last = max(0, -lo), n - max(0, hi)
    if last > first:
        t = np.arange(first, last)
        allowed[t] = jumps[t + hi] == jumps[t + lo]
    return allowed


def _text(step: np.timedelta64) -> str:
    return step_text(step).replace(" ", "")
