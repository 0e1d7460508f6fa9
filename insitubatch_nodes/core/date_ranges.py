"""Date ranges as weather users write them, turned into steps of a time coordinate.

A split is written as an inclusive pair of dates, `("1979-01-01", "2015-12-31T23")`, or
one date for a whole period, `"2016"`. Each date is read at the precision it is written
in: "2015" is every instant of 2015, "2015-12" every instant of December, "2015-12-31T23"
every instant of that hour. A range holds every instant from the start of its first date
to the end of its last, as `ds.sel(time=slice("1979", "2015"))` does in xarray (pandas'
partial-string indexing), so "1979".."2015" ends after 2015-12-31T23:59:59.999999.

numpy's datetime64 parses ISO 8601 at the precision written and counts in that unit, so
the end of a date is the date plus one of its own unit: no calendar arithmetic of ours.
A range becomes the [start, stop) steps of a sorted time coordinate by two binary
searches; the coordinate must be strictly increasing (`check_increasing`), or "the steps
between two dates" would not be one run.

In a calendar numpy cannot hold (`noleap`, `360_day`, `julian`, ...: `core.calendars`) the
axis counts from that calendar's 1970-01-01, and so do the bounds: a date is read into its
fields at the precision written, checked against the calendar ("2015-02-30" is a date of
`360_day` only), and its end is the next year, month, day, hour, ... of that calendar.
"""

from __future__ import annotations

import datetime
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.calendars import PROLEPTIC, days_since_epoch, month_length
from insitubatch_nodes.core.cf_time import dates_text

DateLike = str | np.datetime64 | datetime.date
RangeLike = DateLike | Sequence[DateLike]


@dataclass(frozen=True)
class TimeAxis:
    """A store's time coordinate, decoded: one date per step of the sample axis.

    Args:
        name: the coordinate's array name (the variables' first dimension).
        dates: numpy datetimes, one per step: the dates themselves in numpy's calendar
            (proleptic Gregorian), else the time since `calendar`'s own 1970-01-01 (the
            differences of two steps are durations in every calendar).
        calendar: the calendar the dates are counted in (`core.calendars.calendar_name`):
            `"proleptic_gregorian"` for every axis numpy holds.
    """

    name: str
    dates: np.ndarray
    calendar: str = PROLEPTIC

    def text(self, dates: np.ndarray, unit: str | None = None) -> list[str]:
        """Some of the axis's dates as ISO text in its calendar (`cf_time.dates_text`).

        Args:
            dates: dates of this axis (`self.dates[...]`).
            unit: numpy's unit to write them in, or None for the coarsest exact one.
        """
        return dates_text(dates, unit, self.calendar)


@dataclass(frozen=True)
class DateRange:
    """The instants [start, stop) a user's inclusive range of dates covers.

    Args:
        first: the first date as the user wrote it (as text).
        last: the last date as the user wrote it (as text).
        start: the first instant it covers.
        stop: the first instant after it.
    """

    first: str
    last: str
    start: np.datetime64
    stop: np.datetime64

    def text(self) -> str:
        return self.first if self.first == self.last else f"{self.first} .. {self.last}"


def date_instants(
    value: DateLike, what: str, calendar: str = PROLEPTIC
) -> tuple[np.datetime64, np.datetime64]:
    """The instants [start, stop) a date covers at its own precision: "2015" -> [2015-01-01,
    2016-01-01); a `datetime.date` is its day, a `datetime.datetime` its microsecond.

    Args:
        value: an ISO 8601 date as text ("2015", "2015-12", "2015-12-31T23"), a
            `datetime.date`/`datetime.datetime` (naive, read as UTC) or a numpy datetime64.
        what: what the value is, for the message ("split 'train''s first date").
        calendar: the calendar of the axis it is compared with (`TimeAxis.calendar`):
            in another than numpy's, the instants count from that calendar's 1970-01-01.
    """
    if isinstance(value, datetime.datetime) and value.tzinfo is not None:
        raise ValueError(
            f"{what} is {value!r}, which carries a time zone; give dates in UTC without one "
            f"(time coordinates of weather archives are UTC)"
        )
    if isinstance(value, bool) or not isinstance(value, str | np.datetime64 | datetime.date):
        raise TypeError(
            f"{what} must be a date: ISO 8601 text such as '1979', '2015-12' or "
            f"'2015-12-31T23', a datetime.date/datetime or a numpy datetime64; got "
            f"{value!r} ({type(value).__name__})"
        )
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, str) and text.endswith("Z"):
        text = text[:-1]
    if calendar != PROLEPTIC:
        return _calendar_instants(text, value, what, calendar)
    try:
        start = np.datetime64(text)
    except ValueError:
        raise ValueError(
            f"{what} is {value!r}, which is not an ISO 8601 date; write it as 'YYYY', "
            f"'YYYY-MM', 'YYYY-MM-DD' or 'YYYY-MM-DDTHH[:MM[:SS]]' (UTC)"
        ) from None
    if np.isnat(start):
        raise ValueError(f"{what} is {value!r}, which is not a date (NaT); give a date")
    return start, start + np.timedelta64(1, np.datetime_data(start.dtype)[0])


def date_range(value: RangeLike, what: str, calendar: str = PROLEPTIC) -> DateRange:
    """An inclusive range as a user writes it: `(first, last)`, or one date for its whole
    period ("2016" is all of 2016).

    Args:
        value: a pair of dates, or one date (see `date_instants` for what a date may be).
        what: what the range is, for messages ("split 'train'").
        calendar: the calendar of the axis it selects from (`TimeAxis.calendar`).
    """
    if isinstance(value, str | np.datetime64 | datetime.date):
        first = last = value
    elif isinstance(value, Sequence) and len(value) == 2:
        first, last = value
    else:
        raise ValueError(
            f"{what} must be an inclusive (first, last) pair of dates, e.g. ('1979-01-01', "
            f"'2015-12-31T23'), or one date for a whole period, e.g. '2016'; got {value!r}"
        )
    start, _ = date_instants(first, f"{what}'s first date", calendar)
    _, stop = date_instants(last, f"{what}'s last date", calendar)
    if not _before(start, stop):  # ("2015-06", "2015") is fine: all of 2015 from June on
        raise ValueError(
            f"{what} runs backwards: its last date {_text(last)} ends before its first date "
            f"{_text(first)} begins; give (first, last) in that order"
        )
    return DateRange(_text(first), _text(last), start, stop)


# An ISO 8601 date at any precision, as numpy reads one (a space may stand for the "T").
_FIELDS = re.compile(
    r"^(?P<Y>[+-]?\d{4,})(?:-(?P<M>\d{1,2})(?:-(?P<D>\d{1,2})(?:[T ](?P<h>\d{1,2})"
    r"(?::(?P<m>\d{1,2})(?::(?P<s>\d{1,2})(?:\.(?P<f>\d{1,6}))?)?)?)?)?)?$"
)
_MICRO = {"h": 3_600_000_000, "m": 60_000_000, "s": 1_000_000}


def _calendar_instants(
    text: str | np.datetime64 | datetime.date, value: DateLike, what: str, calendar: str
) -> tuple[np.datetime64, np.datetime64]:
    """`date_instants` in a calendar other than numpy's: the date's fields, checked against
    the calendar, counted from its 1970-01-01; the end is the next value of the last field
    written (the next year, month, day, ...)."""
    if isinstance(text, datetime.date):  # a datetime too: its fields to the microsecond
        text = text.isoformat()
    elif isinstance(text, np.datetime64):
        unit = np.datetime_data(text.dtype)[0]
        text = str(text.astype("M8[us]") if unit in ("ns", "ps", "fs", "as") else text)
    found = _FIELDS.match(text)
    if found is None:
        raise ValueError(
            f"{what} is {value!r}, which is not an ISO 8601 date; write it as 'YYYY', "
            f"'YYYY-MM', 'YYYY-MM-DD' or 'YYYY-MM-DDTHH[:MM[:SS]]' (UTC)"
        )
    year, month, day = int(found["Y"]), int(found["M"] or 1), int(found["D"] or 1)
    clock = [int(found[k] or 0) for k in ("h", "m", "s")]
    fraction = found["f"] or ""
    bad = _outside_calendar(calendar, year, month, day, clock)
    if bad:
        raise ValueError(
            f"{what} is {value!r}, which is not a date of the {calendar!r} calendar of the "
            f"time coordinate ({bad}); give a date of that calendar"
        )
    micro = int((fraction + "000000")[:6])
    in_day = sum(v * _MICRO[k] for k, v in zip(("h", "m", "s"), clock, strict=True)) + micro
    start = int(days_since_epoch(calendar, year, month, day)) * 86_400_000_000 + in_day
    written = [k for k in ("Y", "M", "D", "h", "m", "s") if found[k] is not None][-1]
    if fraction:
        stop = start + 10 ** (6 - len(fraction))
    elif written in _MICRO:
        stop = start + _MICRO[written]
    elif written == "D":
        stop = start + 86_400_000_000
    else:  # a year or a month: its end is the first day of the next one
        after = (year + 1, 1) if written == "Y" or month == 12 else (year, month + 1)
        stop = int(days_since_epoch(calendar, *after, 1)) * 86_400_000_000
    return np.datetime64(start, "us"), np.datetime64(stop, "us")


def _outside_calendar(calendar: str, year: int, month: int, day: int, clock: list[int]) -> str:
    """Why a date's fields name no date of `calendar`, or "" when they do."""
    if not 1 <= month <= 12:
        return f"month {month}"
    days = month_length(calendar, year, month)
    if not 1 <= day <= days:
        return f"{year:04d}-{month:02d} has {days} days"
    hour, minute, second = clock
    if hour > 23 or minute > 59 or second > 59:
        return f"time of day {hour:02d}:{minute:02d}:{second:02d}"
    return ""


def _text(value: DateLike) -> str:
    return value.strip() if isinstance(value, str) else str(np.datetime64(value))


def check_no_overlap(ranges: Mapping[str, DateRange]) -> None:
    """Refuse two splits whose dates overlap: the model would be scored on steps it
    trained on.

    Args:
        ranges: each split's dates.
    """
    ordered = sorted(ranges.items(), key=lambda item: _in_seconds(item[1].start))
    for (a, first), (b, second) in itertools.pairwise(ordered):
        if _before(second.start, first.stop):
            raise ValueError(
                f"splits {a!r} ({first.text()}) and {b!r} ({second.text()}) overlap: a step "
                f"must belong to one split only, or the model is evaluated on steps it "
                f"trained on; end {a!r} before {b!r} begins"
            )


def check_increasing(axis: TimeAxis) -> None:
    """Refuse a time coordinate that is not strictly increasing (or holds NaT): dates
    would not map to one run of steps.

    Args:
        axis: the decoded time coordinate.
    """
    dates = axis.dates
    missing = np.flatnonzero(np.isnat(dates))
    if missing.size:
        raise ValueError(
            f"the time coordinate {axis.name!r} has no date at step {int(missing[0])} (NaT): "
            f"date splits need a date for every step; fill the coordinate, or split by steps "
            f"with make_manifest()"
        )
    bad = np.flatnonzero(np.diff(dates) <= np.timedelta64(0, "us"))
    if bad.size:
        i = int(bad[0])
        before, after = axis.text(dates[i : i + 2])
        raise ValueError(
            f"the time coordinate {axis.name!r} is not increasing: step {i + 1} ({after}) "
            f"comes after step {i} ({before}); date splits need a time axis sorted "
            f"without repeats: sort the store along time, or split by steps with "
            f"make_manifest()"
        )


def range_steps(axis: TimeAxis, dates: DateRange) -> tuple[int, int]:
    """The [start, stop) steps whose dates lie in `dates` (possibly empty).

    Args:
        axis: the time coordinate, strictly increasing (`check_increasing`).
        dates: the range of dates.
    """
    return _first_step_at(axis.dates, dates.start), _first_step_at(axis.dates, dates.stop)


def _in_seconds(date: np.datetime64) -> np.datetime64:
    """`date` to the second: a unit that holds every date a range can name, where a finer
    one would wrap (nanoseconds end in 2262) and a coarser one would round."""
    return date.astype("M8[s]")


def _before(a: np.datetime64, b: np.datetime64) -> bool:
    """`a < b` without overflow: numpy compares in the finer unit of the two, in which the
    coarser date may not fit ("2300" in nanoseconds wraps to 1715)."""
    if _in_seconds(a) != _in_seconds(b):
        return bool(_in_seconds(a) < _in_seconds(b))
    unit = np.result_type(a.dtype, b.dtype)  # within the same second: both fit the finer
    return bool(a.astype(unit) < b.astype(unit))


def _first_step_at(dates: np.ndarray, bound: np.datetime64) -> int:
    """The first step whose date is not before `bound`, compared without rounding either
    (in the finer unit of the two) and without overflow (a bound outside the axis's span
    is placed by its second)."""
    if _in_seconds(bound) < _in_seconds(dates[0]):
        return 0
    if _in_seconds(bound) > _in_seconds(dates[-1]):
        return len(dates)
    unit = np.result_type(dates.dtype, bound.dtype)  # both fit: within the axis's span
    return int(np.searchsorted(dates.astype(unit), bound.astype(unit), side="left"))


_YEAR_FIRST = re.compile(r"^\s*[+-]?\d{4}")


def range_from_text(text: str, what: str) -> tuple[str, str]:
    """An inclusive range written on a command line: "1979:2015", "1979..2015", or one
    date ("2016"). A colon separates the dates only where a date (a 4-digit year) follows
    it, so "2015-12-31T23:00" stays one date.

    Args:
        text: the range as typed.
        what: what it is, for the message ("--train").
    """
    text = text.strip()
    if ".." in text:
        first, _, last = text.partition("..")
        return first.strip(), last.strip()
    cuts = [i for i, c in enumerate(text) if c == ":" and _YEAR_FIRST.match(text[i + 1 :])]
    if len(cuts) > 1:
        raise ValueError(
            f"{what} is {text!r}: write one range as FIRST:LAST (e.g. 1979:2015 or "
            f"1979-01-01:2015-12-31T23), or FIRST..LAST"
        )
    if cuts:
        return text[: cuts[0]].strip(), text[cuts[0] + 1 :].strip()
    return text, text
