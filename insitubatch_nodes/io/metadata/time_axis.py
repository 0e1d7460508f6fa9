"""A store's time coordinate, found and decoded as xarray finds and decodes it.

Found: the 1-D array named by the variables' first dimension (Zarr v3
`dimension_names`, v2 `_ARRAY_DIMENSIONS`), else one with a usual time name, else one
whose attributes say it is time (CF `axis: T`, `standard_name: time`, units "... since
..."). Decoded: datetime64 stored natively as it is; CF numbers ("hours since
1900-01-01", `calendar`) by `core.cf_time` when that is exact (the Gregorian calendar, fixed
units, a UTC reference: what weather archives use, without xarray), else by xarray's own
decoder (`xarray.coding.times.decode_cf_datetime`: time-zone offsets in the reference)
when xarray is installed. Both give the same dates where both decode
(`tests/io/test_date_splits.py` checks ours against xarray's). Calendars numpy cannot hold
(`noleap`, `360_day`, `all_leap`, `julian`, and `standard` dates before 1582) are decoded by
cftime (`io.metadata.calendar_times`) and counted from the calendar's own 1970-01-01.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import zarr

from insitubatch_nodes.core.calendars import CALENDAR_NAMES, PROLEPTIC, STANDARD, calendar_name
from insitubatch_nodes.core.cf_time import SINCE, decode_cf_times
from insitubatch_nodes.core.date_ranges import TimeAxis
from insitubatch_nodes.io.metadata.calendar_times import calendar_dates
from insitubatch_nodes.io.metadata.dimensions import coordinate, coordinate_values, dimension_names
from insitubatch_nodes.io.metadata.time_dimension import TIME_NAMES  # after axis 0's name


def find_time_array(
    arrays: Mapping[str, zarr.Array], variables: Sequence[str], length: int
) -> tuple[str, zarr.Array] | None:
    """The time coordinate of `variables`: the 1-D array of `length` values their first
    dimension names, else one with a usual time name, else one whose attributes say it
    is time; None when there is none.

    Args:
        arrays: the group's arrays by name.
        variables: the selected variables.
        length: their length along axis 0.
    """
    first_dims = [dims[0] for n in variables if (dims := dimension_names(arrays[n]))]
    for name in [*first_dims, *TIME_NAMES]:
        found = coordinate(arrays, name, length)
        if found is not None:
            return name, found
    for name, array in sorted(arrays.items()):
        attrs = array.attrs
        units = attrs.get("units")
        timely = (
            attrs.get("axis") == "T"
            or attrs.get("standard_name") == "time"
            or (isinstance(units, str) and SINCE.match(units) is not None)
        )
        if timely and coordinate(arrays, name, length) is not None:
            return name, array
    return None


def cf_attributes(array: zarr.Array) -> tuple[str | None, str | None]:
    """The CF `units` and `calendar` of a coordinate (None where absent or not text).

    Args:
        array: the coordinate array.
    """
    units = array.attrs.get("units")
    calendar = array.attrs.get("calendar")
    return (
        units if isinstance(units, str) else None,
        calendar if isinstance(calendar, str) else None,
    )


def decode_dates(
    values: np.ndarray, units: str | None, calendar: str | None, name: str
) -> tuple[np.ndarray, str]:
    """`values` as numpy datetimes and the calendar they count in (`TimeAxis`), or an error
    that says why they cannot be.

    Args:
        values: the stored values.
        units: their CF `units` attribute.
        calendar: their CF `calendar` attribute.
        name: the coordinate's name, for messages.
    """
    dates = decode_cf_times(values, units, calendar)
    if dates is not None:
        return dates, PROLEPTIC
    if units is None or SINCE.match(units) is None:
        raise ValueError(
            f"the time coordinate {name!r} holds {np.asarray(values).dtype} values without CF "
            f"units ('hours since 1900-01-01'), so they are not dates; give it CF units "
            f"(xarray writes them), store datetime64, or split by steps with make_manifest()"
        )
    named = calendar_name(calendar)
    if named is None:
        raise ValueError(
            f"the time coordinate {name!r} has calendar {calendar!r}, which CF does not "
            f"define; CF's calendars are {sorted(CALENDAR_NAMES)}: fix the attribute, or "
            f"split by steps with make_manifest()"
        )
    if named not in (PROLEPTIC, STANDARD):
        return calendar_dates(values, units, named, name), named
    decoded = _xarray_dates(values, units, calendar, name)
    if decoded.dtype.kind == "M":
        return decoded, PROLEPTIC
    return calendar_dates(values, units, named, name), named  # Julian dates before 1582


def _xarray_dates(values: np.ndarray, units: str, calendar: str | None, name: str) -> Any:
    """Gregorian dates the library does not decode by itself (a time-zone offset in the
    units, dates before 1582), decoded by xarray: numpy datetimes, or cftime objects for
    dates numpy's calendar does not hold."""
    try:
        from xarray.coding.times import decode_cf_datetime
    except ImportError:
        raise ValueError(
            f"the time coordinate {name!r} has units {units!r} and calendar {calendar!r}, "
            f"which the library decodes only through xarray (it decodes by itself the "
            f"Gregorian calendar in fixed units since a UTC date); install xarray (pip "
            f"install 'insitubatch-nodes[xarray]')"
        ) from None
    try:
        return np.asarray(decode_cf_datetime(np.asarray(values), units, calendar))
    except Exception as err:  # xarray's and cftime's own errors say what they could not do
        raise ValueError(
            f"the time coordinate {name!r} (units {units!r}, calendar {calendar!r}) does not "
            f"decode to dates: {err}"
        ) from None


def read_time_axis(
    arrays: Mapping[str, zarr.Array],
    variables: Sequence[str],
    length: int,
    where: str,
    secrets: Iterable[str] = (),
) -> TimeAxis:
    """The decoded time coordinate of `variables`, read whole (one 1-D array).

    Args:
        arrays: the group's arrays by name.
        variables: the selected variables.
        length: their length along axis 0.
        where: the store's description for messages (credentials redacted).
        secrets: values known to be secret, kept out of a failed read's error.
    """
    found = find_time_array(arrays, variables, length)
    if found is None:
        one_d = sorted(n for n, a in arrays.items() if a.ndim == 1)
        raise ValueError(
            f"{where} has no time coordinate for {list(variables)}: dates need a 1-D array "
            f"of {length} dates named by the variables' first dimension (dimension_names in "
            f"Zarr v3, _ARRAY_DIMENSIONS in v2; its 1-D arrays are {one_d}); write one (xarray "
            f"does), or split by steps with make_manifest()"
        )
    name, array = found
    units, calendar = cf_attributes(array)
    values = coordinate_values(array, where, secrets)
    dates, named = decode_dates(values, units, calendar, name)
    return TimeAxis(name, dates, named)
