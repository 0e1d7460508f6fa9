"""CF time coordinates in calendars numpy cannot hold (`noleap`, `360_day`, `all_leap`,
`julian`, and `standard` before 1582), decoded by cftime as xarray decodes them.

cftime reads the units ("days since 1850-01-01", "months since" in `360_day`) exactly as
`xr.open_zarr(..., use_cftime=True)` does; its dates are then counted from the
calendar's own 1970-01-01 in microseconds (`TimeAxis.dates`), so that the pure core
compares and subtracts numbers (`core.calendars` turns them into text and the bounds of a
split into the same counts). cftime is an optional dependency: the `calendars` extra (or
`xarray`) brings it, and without it such a coordinate is refused saying so.
"""

from __future__ import annotations

from typing import Any

import numpy as np

CALENDARS_EXTRA = "pip install 'insitubatch-nodes[calendars]'"


def calendar_dates(values: np.ndarray, units: str, calendar: str, name: str) -> np.ndarray:
    """`values` (CF numbers in `units` and `calendar`) as microseconds since the
    calendar's 1970-01-01, as numpy datetimes; NaT where a value is not a finite number.

    Args:
        values: the stored values.
        units: their CF `units` ("hours since 1850-01-01").
        calendar: their calendar (`core.calendars.calendar_name`).
        name: the coordinate's name, for messages.
    """
    cftime = _cftime(name, calendar)
    values = np.asarray(values)
    finite = np.isfinite(values) if values.dtype.kind == "f" else np.ones(values.shape, bool)
    micro = np.full(values.shape, np.iinfo(np.int64).min, dtype=np.int64)  # NaT
    if finite.any():
        try:
            dates = cftime.num2date(values[finite], units, calendar, only_use_cftime_datetimes=True)
            counted = cftime.date2num(dates, "microseconds since 1970-01-01", calendar)
        except Exception as err:  # cftime's own errors say what it could not read
            raise ValueError(
                f"the time coordinate {name!r} (units {units!r}, calendar {calendar!r}) does "
                f"not decode to dates: {err}"
            ) from None
        counted = np.asarray(counted)  # integers where exact: cftime keeps microseconds
        micro[finite] = counted if counted.dtype.kind in "iu" else np.round(counted)
    return micro.astype("M8[us]")


def cftime_dates(values: np.ndarray, name: str) -> tuple[np.ndarray, str]:
    """cftime dates (an xarray coordinate decoded with cftime) as `calendar_dates` counts
    them, and their calendar.

    Args:
        values: an object array of cftime datetimes, all of one calendar.
        name: the coordinate's name, for messages.
    """
    calendars = {getattr(v, "calendar", None) for v in values.flat}
    if len(calendars) != 1 or None in calendars:
        raise ValueError(
            f"the Dataset's {name!r} holds {np.asarray(values).dtype} values that are not "
            f"dates of one calendar: open it with xr.open_zarr's default decode_times=True"
        )
    (calendar,) = calendars
    cftime = _cftime(name, calendar)
    counted = cftime.date2num(values, "microseconds since 1970-01-01", calendar)
    return np.asarray(counted).astype(np.int64).astype("M8[us]"), str(calendar)


def _cftime(name: str, calendar: str) -> Any:
    try:
        import cftime
    except ImportError:
        raise ValueError(
            f"the time coordinate {name!r} uses the {calendar!r} calendar, whose dates are "
            f"decoded by cftime (as xarray decodes them), which is not installed; install "
            f"it ({CALENDARS_EXTRA}, or pip install cftime), or split by steps with "
            f"make_manifest()"
        ) from None
    return cftime
