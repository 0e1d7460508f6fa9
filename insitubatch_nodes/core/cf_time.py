"""CF time coordinates ("hours since 1900-01-01") as numpy dates, when that is exact.

xarray stores a time coordinate as numbers with CF `units` ("UNIT since DATE") and a
`calendar`. Most weather archives use the Gregorian calendar and a UTC reference, which
numpy's datetime64 represents exactly; other calendars (a 360-day year, "noleap") have
dates numpy cannot hold, and months or years have no fixed length: those are left
undecoded (the caller shows the stored numbers) rather than decoded wrongly. No cftime
or pandas is needed for the common case.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from insitubatch_nodes.core.calendars import PROLEPTIC, calendar_dates_text

# CF's unit names (and the usual abbreviations), as numpy's
_UNITS = {
    **dict.fromkeys(("days", "day", "d"), "D"),
    **dict.fromkeys(("hours", "hour", "hrs", "hr", "h"), "h"),
    **dict.fromkeys(("minutes", "minute", "mins", "min"), "m"),
    **dict.fromkeys(("seconds", "second", "secs", "sec", "s"), "s"),
    **dict.fromkeys(("milliseconds", "millisecond", "ms"), "ms"),
    **dict.fromkeys(("microseconds", "microsecond", "us"), "us"),
}
SIMPLE_CALENDARS = (None, "standard", "gregorian", "proleptic_gregorian")
SINCE = re.compile(r"^\s*(?P<unit>[A-Za-z]+)\s+since\s+(?P<date>.+?)\s*$")
_DATE = re.compile(
    r"^(?P<y>\d{1,4})-(?P<mo>\d{1,2})-(?P<d>\d{1,2})"
    r"(?:[ T](?P<h>\d{1,2}):(?P<mi>\d{1,2})(?::(?P<s>\d{1,2})(?:\.(?P<f>\d+))?)?)?"
    r"\s*(?:Z|UTC|GMT|[+-]00:?00)?$"
)
_GREGORIAN_START = np.datetime64("1582-10-15")  # "standard" and proleptic agree from here


def cf_reference(units: str | None, calendar: str | None) -> tuple[str, np.datetime64] | None:
    """numpy's unit and the reference date of CF units such as "hours since 1900-01-01
    00:00:00", or None when they are not that simple: another calendar, a reference
    before the Gregorian calendar began (where "standard" is Julian), a time zone other
    than UTC, months or years, or no "since" at all.

    Args:
        units: the coordinate's `units` attribute.
        calendar: its `calendar` attribute (None: CF's default, "standard").
    """
    if not isinstance(units, str) or calendar not in SIMPLE_CALENDARS:
        return None
    since = SINCE.match(units)
    if since is None or since["unit"].lower() not in _UNITS:
        return None
    date = _DATE.match(since["date"])
    if date is None:
        return None
    text = f"{int(date['y']):04d}-{int(date['mo']):02d}-{int(date['d']):02d}"
    text += f"T{int(date['h'] or 0):02d}:{int(date['mi'] or 0):02d}:{int(date['s'] or 0):02d}"
    if date["f"]:
        text += "." + date["f"][:6]
    try:
        reference = np.datetime64(text)
    except ValueError:  # month 13, day 32
        return None
    if calendar != "proleptic_gregorian" and reference < _GREGORIAN_START:
        return None
    return _UNITS[since["unit"].lower()], reference


def decode_cf_times(
    values: np.ndarray, units: str | None, calendar: str | None
) -> np.ndarray | None:
    """`values` as numpy datetimes, or None when their units are not simple
    (`cf_reference`) or a value is not a finite number.

    Args:
        values: the stored values (numbers, or datetimes already).
        units: the coordinate's `units` attribute.
        calendar: its `calendar` attribute.
    """
    values = np.asarray(values)
    if values.dtype.kind == "M":
        return values
    found = cf_reference(units, calendar)
    if found is None or values.dtype.kind not in "iuf":
        return None
    unit, reference = found
    if values.dtype.kind == "f":
        if not np.isfinite(values).all():
            return None
        if not np.array_equal(values, np.round(values)):  # fractions: count microseconds
            per_unit = np.timedelta64(1, unit) // np.timedelta64(1, "us")
            offsets = np.round(values * per_unit).astype(np.int64).astype("m8[us]")
            return reference + offsets
    return reference + values.astype(np.int64).astype(f"m8[{unit}]")


def date_unit(dates: Sequence[np.datetime64] | np.ndarray) -> str:
    """The coarsest of days, minutes and seconds that holds every one of `dates` exactly,
    else numpy's own unit: the precision to write them in.

    Args:
        dates: numpy datetimes.
    """
    values = np.asarray(dates)
    for unit in ("D", "m", "s"):
        if np.array_equal(values.astype(f"M8[{unit}]").astype(values.dtype), values):
            return unit
    return np.datetime_data(values.dtype)[0]


def dates_text(
    dates: Sequence[np.datetime64] | np.ndarray,
    unit: str | None = None,
    calendar: str = PROLEPTIC,
) -> list[str]:
    """Dates as ISO text, all to the same precision: `unit`, or by default the coarsest
    that loses nothing (`date_unit`).

    Args:
        dates: numpy datetimes; in a calendar other than numpy's, counted from that
            calendar's 1970-01-01 (`date_ranges.TimeAxis`).
        unit: numpy's unit to write them in ("D", "m", "s", ...), or None.
        calendar: the calendar to write them in (`core.calendars`).
    """
    values = np.asarray(dates)
    unit = date_unit(values) if unit is None else unit
    if calendar != PROLEPTIC:
        return calendar_dates_text(values, calendar, unit)
    return [str(v) for v in values.astype(f"M8[{unit}]")]


def step_text(step: np.timedelta64) -> str:
    """A time step in the largest whole unit: "6 h", "1 d", "90 s".

    Args:
        step: the difference of two dates.
    """
    micro = int(step.astype("m8[us]").astype(np.int64))
    for unit, size in (
        ("d", 86_400_000_000),
        ("h", 3_600_000_000),
        ("min", 60_000_000),
        ("s", 1_000_000),
    ):
        if micro and micro % size == 0:
            return f"{micro // size} {unit}"
    return f"{micro} us"
