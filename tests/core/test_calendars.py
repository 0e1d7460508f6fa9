"""`core.calendars` against cftime: the day counts of every CF calendar and their dates
are cftime's, both ways, from year 1 to 2517 (the Julian part of `standard` included), and
dates are written in their own calendar's fields."""

from __future__ import annotations

import cftime
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.calendars import (
    calendar_dates_text,
    calendar_name,
    dates_of_days,
    days_since_epoch,
    month_length,
)

CALENDARS = ("noleap", "all_leap", "360_day", "julian", "proleptic_gregorian", "standard")
DAYS = st.lists(st.integers(-719_000, 200_000), min_size=1, max_size=50)  # years 1 .. 2517


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CALENDARS), DAYS)
def test_day_counts_and_dates_are_cftimes_both_ways(calendar: str, days: list[int]) -> None:
    counts = np.array(days, dtype=np.int64)
    dates = cftime.num2date(counts, "days since 1970-01-01", calendar)
    fields = [np.array([getattr(d, k) for d in dates]) for k in ("year", "month", "day")]
    ours = dates_of_days(calendar, counts)
    for theirs, mine in zip(fields, ours, strict=True):
        np.testing.assert_array_equal(np.asarray(mine), theirs)
    np.testing.assert_array_equal(days_since_epoch(calendar, *fields), counts)


def test_month_lengths_are_the_calendars() -> None:
    assert [month_length("noleap", 2016, 2), month_length("all_leap", 2015, 2)] == [28, 29]
    assert month_length("360_day", 2015, 1) == 30
    assert [month_length("julian", 1900, 2), month_length("standard", 1900, 2)] == [29, 28]
    assert month_length("standard", 1500, 2) == 29  # Julian before 1582


def test_names_and_aliases_are_cfs() -> None:
    assert calendar_name(None) == "standard"  # CF's default
    assert calendar_name("Gregorian") == "standard"
    assert calendar_name("365_day") == "noleap"
    assert calendar_name("366_day") == "all_leap"
    assert calendar_name("mars") is None


def test_dates_are_written_in_their_own_calendar() -> None:
    days = days_since_epoch("360_day", 2015, 2, 30)
    dates = np.array([days * 86_400_000_000 + 6 * 3_600_000_000], dtype="M8[us]")
    assert calendar_dates_text(dates, "360_day", "m") == ["2015-02-30T06:00"]
    assert calendar_dates_text(dates, "360_day", "D") == ["2015-02-30"]
