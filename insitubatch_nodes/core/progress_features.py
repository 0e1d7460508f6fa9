"""Where an instant stands in its year and in its local day, as GraphCast's
`data_utils.py` defines them, so that a checkpoint trained on its inputs sees the same
numbers here.

    year progress = (seconds since 1970-01-01 / 86400 / 365.24219) mod 1
    day progress  = ((seconds since 1970-01-01 mod 86400) / 86400 + longitude / 360) mod 1

The second is local mean solar time as a fraction of the day (longitude in degrees, east
positive). Both are fed to a model as sin and cos of 2 pi times the progress; the
progress is rounded to float32 first, and the sine and cosine taken in float32, as
GraphCast does.

A model's own calendar (`noleap`, `all_leap`, `360_day`, whose years have a fixed number
of days) has no tropical year: there the year progress is the fraction of the calendar's
own year gone by, (seconds since its 1970-01-01 / 86400 / days in its year) mod 1, so
that each calendar date has one progress every year (1 March is 59/365 in every noleap
year). Days are 86400 seconds in every calendar, so the day progress is the same formula.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from insitubatch_nodes.core.calendars import PROLEPTIC, STANDARD

TROPICAL_YEAR_DAYS = 365.24219  # GraphCast's average year
SECONDS_PER_DAY = 86_400
# the calendars whose years all have the same number of days, and that number
FIXED_YEAR_DAYS = {"noleap": 365, "all_leap": 366, "360_day": 360}
# Julian dates count from the Julian 1970-01-01, 13 days after the Gregorian one
JULIAN_EPOCH_SECONDS = 13 * SECONDS_PER_DAY
REAL_CALENDARS = (PROLEPTIC, STANDARD, "julian")


def year_length_days(calendar: str) -> float:
    """Days in the year the year progress counts in `calendar`: the tropical year on the
    calendars of real dates, the calendar's own year on a model's.

    Args:
        calendar: a calendar name (`core.calendars.calendar_name`).
    """
    if calendar in FIXED_YEAR_DAYS:
        return float(FIXED_YEAR_DAYS[calendar])
    if calendar in REAL_CALENDARS:
        return TROPICAL_YEAR_DAYS
    raise ValueError(f"no year progress is defined on the calendar {calendar!r}")


def year_progress(seconds: np.ndarray, calendar: str = PROLEPTIC) -> np.ndarray:
    """The year progress (float32 in [0, 1)) of instants counted in seconds from the
    calendar's 1970-01-01 (float64 or int64).

    Args:
        seconds: the instants, any shape.
        calendar: the calendar they are counted in (`year_length_days`).
    """
    years = np.asarray(seconds, dtype=np.float64) / SECONDS_PER_DAY / year_length_days(calendar)
    return np.remainder(years, 1.0).astype(np.float32)


def day_fraction(seconds: np.ndarray) -> np.ndarray:
    """The fraction of the UTC day (float64 in [0, 1)) of instants counted in seconds from
    a 1970-01-01 midnight, in any calendar.

    Args:
        seconds: the instants, any shape.
    """
    return np.remainder(np.asarray(seconds, dtype=np.float64), SECONDS_PER_DAY) / SECONDS_PER_DAY


def day_progress(xp: Any, fraction: Any, longitude_degrees: Any) -> Any:
    """The day progress at each longitude: `(fraction + longitude / 360) mod 1`, in the
    inputs' dtype (float64 for GraphCast's numbers; the caller rounds to float32).

    Args:
        xp: the array namespace (numpy, or torch) of the arrays given.
        fraction: `day_fraction` of each instant, shaped to broadcast against the grid.
        longitude_degrees: the grid's longitudes in degrees, broadcastable.
    """
    progress = fraction + longitude_degrees / 360.0
    return xp.subtract(progress, xp.floor(progress), out=progress)  # remainder's 10x speed


def progress_phase(progress: Any) -> Any:
    """2 pi times the progress, in the progress's (float32) dtype: the angle whose sine and
    cosine are the features.

    Args:
        progress: year or day progress.
    """
    return progress * (2 * math.pi)
