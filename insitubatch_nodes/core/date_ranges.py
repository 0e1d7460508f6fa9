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
"""

from __future__ import annotations

import datetime
import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.cf_time import dates_text

DateLike = str | np.datetime64 | datetime.date
RangeLike = DateLike | Sequence[DateLike]


@dataclass(frozen=True)
class TimeAxis:
    """A store's time coordinate, decoded: one date per step of the sample axis.

    Args:
        name: the coordinate's array name (the variables' first dimension).
        dates: numpy datetimes, one per step.
    """

    name: str
    dates: np.ndarray


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


def date_instants(value: DateLike, what: str) -> tuple[np.datetime64, np.datetime64]:
    """The instants [start, stop) a date covers at its own precision: "2015" -> [2015-01-01,
    2016-01-01); a `datetime.date` is its day, a `datetime.datetime` its microsecond.

    Args:
        value: an ISO 8601 date as text ("2015", "2015-12", "2015-12-31T23"), a
            `datetime.date`/`datetime.datetime` (naive, read as UTC) or a numpy datetime64.
        what: what the value is, for the message ("split 'train''s first date").
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


def date_range(value: RangeLike, what: str) -> DateRange:
    """An inclusive range as a user writes it: `(first, last)`, or one date for its whole
    period ("2016" is all of 2016).

    Args:
        value: a pair of dates, or one date (see `date_instants` for what a date may be).
        what: what the range is, for messages ("split 'train'").
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
    start, _ = date_instants(first, f"{what}'s first date")
    _, stop = date_instants(last, f"{what}'s last date")
    if not _before(start, stop):  # ("2015-06", "2015") is fine: all of 2015 from June on
        raise ValueError(
            f"{what} runs backwards: its last date {_text(last)} ends before its first date "
            f"{_text(first)} begins; give (first, last) in that order"
        )
    return DateRange(_text(first), _text(last), start, stop)


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
        before, after = dates_text(dates[i : i + 2])
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
