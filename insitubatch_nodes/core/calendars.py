"""CF calendars as day counts, so that dates of any calendar compare as numbers.

Climate models date their steps in calendars numpy cannot hold: `noleap` (365 days every
year), `all_leap` (366), `360_day` (twelve months of 30 days), `julian`, and CF's
`standard`, which is Julian before 1582-10-15 and Gregorian from then on. Every one of
them has days of 86400 seconds, so a date is exactly "days since the calendar's
1970-01-01, plus the time of day", and the difference of two dates is a plain duration.
The loader keeps a time axis that way, as numpy datetimes counted from the calendar's own
1970-01-01 (`TimeAxis.dates`): windows, frequencies and gaps are then differences, as on
the Gregorian axis, and only turning a date into a count (a split's bounds) or a count
into text (what a split holds) needs the calendar's months. Both are here, vectorised;
the tests hold them to cftime's from year 1 on (before it, years are counted with a year
0, as numpy counts them, where cftime's Julian calendars have none).
"""

from __future__ import annotations

from typing import Any

import numpy as np

PROLEPTIC = "proleptic_gregorian"  # numpy's calendar
STANDARD = "standard"
# CF's names and aliases -> the name used here (CF conventions 1.11, section 4.4.1)
CALENDAR_NAMES = {
    "standard": STANDARD,
    "gregorian": STANDARD,
    "proleptic_gregorian": PROLEPTIC,
    "noleap": "noleap",
    "365_day": "noleap",
    "all_leap": "all_leap",
    "366_day": "all_leap",
    "360_day": "360_day",
    "julian": "julian",
}
# The first day of the Gregorian calendar in the standard one; before it, dates are Julian.
GREGORIAN_START = (1582, 10, 15)

_DAY_US = 86_400_000_000
_NOLEAP_MONTHS = np.array([31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)
_ALL_LEAP_MONTHS = np.array([31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], dtype=np.int64)
_NOLEAP_BEFORE = np.concatenate([[0], np.cumsum(_NOLEAP_MONTHS)])
_ALL_LEAP_BEFORE = np.concatenate([[0], np.cumsum(_ALL_LEAP_MONTHS)])


def calendar_name(calendar: str | None) -> str | None:
    """The calendar a CF `calendar` attribute names (aliases and case folded; no attribute
    is CF's default, `standard`), or None for a name CF does not define.

    Args:
        calendar: the attribute's value, or None when the coordinate has none.
    """
    if calendar is None:
        return STANDARD
    return CALENDAR_NAMES.get(calendar.strip().lower())


def month_length(calendar: str, year: int, month: int) -> int:
    """Days in `month` of `year` in `calendar` (October 1582 of the standard calendar
    counts its 31 names, ten of which it skips).

    Args:
        calendar: a calendar's name (`calendar_name`).
        year: the year.
        month: the month, 1 to 12.
    """
    if calendar == "360_day":
        return 30
    if month != 2:
        return int(_NOLEAP_MONTHS[month - 1])
    return 29 if _is_leap(calendar, year, month) else 28


def _is_leap(calendar: str, year: int, month: int) -> bool:
    if calendar == "noleap":
        return False
    if calendar == "all_leap":
        return True
    julian = calendar == "julian" or (calendar == STANDARD and (year, month) < (1582, 10))
    if julian:
        return year % 4 == 0
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_since_epoch(calendar: str, year: np.ndarray, month: np.ndarray, day: np.ndarray) -> Any:
    """Days from the calendar's 1970-01-01 to each date (year, month, day), as int64.

    A day past its month's end counts on into the next month (the 29th of February of a
    `noleap` year is the 1st of March): the bounds of a split may name such a day.

    Args:
        calendar: a calendar's name (`calendar_name`).
        year: the years.
        month: the months, 1 to 12.
        day: the days of the month, from 1.
    """
    y, m, d = (np.asarray(v, dtype=np.int64) for v in (year, month, day))
    if calendar == "360_day":
        return (y - 1970) * 360 + (m - 1) * 30 + d - 1
    if calendar == "noleap":
        return (y - 1970) * 365 + _NOLEAP_BEFORE[m - 1] + d - 1
    if calendar == "all_leap":
        return (y - 1970) * 366 + _ALL_LEAP_BEFORE[m - 1] + d - 1
    gregorian = _julian_day(y, m, d, gregorian=True) - _julian_day(1970, 1, 1, gregorian=True)
    if calendar == PROLEPTIC:
        return gregorian
    julian = _julian_day(y, m, d, gregorian=False)
    if calendar == "julian":
        return julian - _julian_day(1970, 1, 1, gregorian=False)
    # standard: Julian before the Gregorian start, on the same count of days as Gregorian
    before = (y * 10_000 + m * 100 + d) < (1582 * 10_000 + 10 * 100 + 15)
    return np.where(before, julian - _julian_day(1970, 1, 1, gregorian=True), gregorian)


def _julian_day(y: Any, m: Any, d: Any, *, gregorian: bool) -> Any:
    """The Julian day number of a date of the Gregorian or the Julian calendar (the usual
    integer formula, counting years from March so that February falls last)."""
    a = (14 - m) // 12
    years = y + 4800 - a
    months = m + 12 * a - 3
    days = d + (153 * months + 2) // 5 + 365 * years + years // 4
    if gregorian:
        return days - years // 100 + years // 400 - 32045
    return days - 32083


def dates_of_days(calendar: str, days: np.ndarray) -> tuple[Any, Any, Any]:
    """(years, months, days of the month) of day counts from the calendar's 1970-01-01:
    the inverse of `days_since_epoch`.

    Args:
        calendar: a calendar's name (`calendar_name`).
        days: int64 day counts.
    """
    days = np.asarray(days, dtype=np.int64)
    if calendar in ("360_day", "noleap", "all_leap"):
        length = {"360_day": 360, "noleap": 365, "all_leap": 366}[calendar]
        years, in_year = np.divmod(days, length)
        if calendar == "360_day":
            return years + 1970, in_year // 30 + 1, in_year % 30 + 1
        before = _NOLEAP_BEFORE if calendar == "noleap" else _ALL_LEAP_BEFORE
        months = np.searchsorted(before, in_year, side="right")
        return years + 1970, months, in_year - before[months - 1] + 1
    if calendar == "julian":
        return _julian_date(days + _julian_day(1970, 1, 1, gregorian=False))
    gregorian = _gregorian_date(days)
    if calendar == PROLEPTIC:
        return gregorian
    start = days_since_epoch(PROLEPTIC, *GREGORIAN_START)
    julian = _julian_date(days + _julian_day(1970, 1, 1, gregorian=True))
    before = days < start
    year, month, day = (np.where(before, j, g) for j, g in zip(julian, gregorian, strict=True))
    return year, month, day


def _gregorian_date(days: np.ndarray) -> tuple[Any, Any, Any]:
    """numpy's own calendar does the Gregorian fields."""
    dates = days.astype("M8[D]")
    years = dates.astype("M8[Y]")
    months = dates.astype("M8[M]")
    return (
        years.astype(np.int64) + 1970,
        (months - years.astype("M8[M]")).astype(np.int64) + 1,
        (dates - months.astype("M8[D]")).astype(np.int64) + 1,
    )


def _julian_date(julian_day: np.ndarray) -> tuple[Any, Any, Any]:
    """The Julian calendar's (year, month, day) of Julian day numbers (the inverse of
    `_julian_day`)."""
    c = julian_day + 32082
    d = (4 * c + 3) // 1461
    e = c - 1461 * d // 4
    m = (5 * e + 2) // 153
    return d - 4800 + m // 10, m + 3 - 12 * (m // 10), e - (153 * m + 2) // 5 + 1


def calendar_dates_text(dates: np.ndarray, calendar: str, unit: str) -> list[str]:
    """Dates counted from the calendar's 1970-01-01 (numpy datetimes) as ISO text in that
    calendar, to `unit` ("D", "h", "m", "s", "ms", "us"), as numpy writes its own.

    Args:
        dates: numpy datetimes on the calendar's time line (`TimeAxis.dates`).
        calendar: a calendar's name (`calendar_name`).
        unit: numpy's unit to write them in.
    """
    micro = np.asarray(dates).astype("M8[us]").astype(np.int64)
    days, in_day = np.divmod(micro, _DAY_US)
    years, months, mdays = dates_of_days(calendar, days)
    # the time of day at that unit, written by numpy on its own first day
    clock = np.datetime64(0, "us") + in_day.astype("m8[us]")
    texts = []
    for y, m, d, c in zip(years.tolist(), months.tolist(), mdays.tolist(), clock, strict=True):
        day = f"{y:04d}-{m:02d}-{d:02d}" if y >= 0 else f"{y:05d}-{m:02d}-{d:02d}"
        whole_days = unit in ("Y", "M", "W", "D")
        texts.append(day if whole_days else day + str(c.astype(f"M8[{unit}]"))[10:])
    return texts
