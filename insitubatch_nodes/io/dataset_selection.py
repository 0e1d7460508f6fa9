"""Where a Dataset's selection lies in the store it was opened from: the dates of a time
selection, the level values, the run of grid positions.

`io.xarray_source` maps a Dataset back to the loader's settings; this module reads the
store's own coordinates to find what each `.sel`/`.isel` took. Each finding is what the
loader can read from stored chunks (a run of steps, or every k-th step of one; levels in
the Dataset's order; one run of the grid), or an error saying what was selected that
chunks cannot give and how to select it instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from insitubatch_nodes.core.cf_time import date_unit
from insitubatch_nodes.core.date_ranges import TimeAxis
from insitubatch_nodes.core.patches import REGION, PatchSpec
from insitubatch_nodes.io.metadata.calendar_times import cftime_dates
from insitubatch_nodes.io.metadata.dimensions import coordinate, coordinate_values
from insitubatch_nodes.io.metadata.time_axis import read_time_axis


def _positions(selected: np.ndarray, stored: np.ndarray) -> np.ndarray | None:
    """Where each selected value sits among the stored ones (None if one is not there)."""
    order = np.argsort(stored, kind="stable")
    at = np.searchsorted(stored[order], selected)
    at = np.clip(at, 0, stored.size - 1)
    found = order[at]
    if not np.array_equal(stored[found], selected):
        return None
    return found


def time_selection(
    ds: Any,
    dim: str,
    arrays: Mapping[str, zarr.Array],
    names: Sequence[str],
    length: int,
    where: str,
    secrets: Sequence[str],
) -> tuple[tuple[str, str] | None, int, tuple[np.datetime64, np.datetime64] | None]:
    """The Dataset's time selection as a split: (its first and last date as the store's
    calendar writes them, the stride, the same two dates as `TimeAxis.dates` counts them),
    or (None, 1, None) when time is whole; an error for a selection that is not a run of
    stored steps (or every k-th step of one, counted from the store's first step).

    Args:
        ds: the Dataset.
        dim: its time dimension.
        arrays: the store's arrays by name.
        names: the selected time-varying variables.
        length: their stored steps.
        where: the store as messages name it.
        secrets: values kept out of messages.
    """
    if ds.sizes[dim] == length and dim not in ds.coords:
        return None, 1, None
    if dim not in ds.coords:
        raise ValueError(
            f"the Dataset selects {ds.sizes[dim]} of {length} steps along {dim!r}, which has "
            f"no coordinate to say which: select time by date (ds.sel(time=...))"
        )
    axis = read_time_axis(arrays, names, length, where, secrets)
    selected = _selected_dates(np.asarray(ds[dim].values), dim)
    if selected.size == length and np.array_equal(selected, axis.dates.astype(selected.dtype)):
        return None, 1, None
    at = _positions(selected, axis.dates.astype(selected.dtype))
    if at is None or at.size == 0:
        raise ValueError(
            f"the Dataset's {dim!r} holds dates that are not the store's (reindexed or "
            f"interpolated?): select existing steps with ds.sel(time=slice(first, last))"
        )
    steps = np.diff(at)
    stride = int(steps[0]) if steps.size else 1
    if steps.size and (stride < 1 or not (steps == stride).all()):
        raise ValueError(
            f"the Dataset's {dim!r} selection is not a run of steps (nor every k-th step of "
            f"one): the loader reads a split as a range of dates; select with "
            f"ds.sel(time=slice(first, last)) or ds.isel(time=slice(start, stop, k))"
        )
    if int(at[0]) % stride:
        raise ValueError(
            f"the Dataset takes every {stride}th step from step {int(at[0])}; a stride counts "
            f"from the store's first step, so start at a multiple of {stride} (or use "
            f"frequency= with the whole time axis)"
        )
    ends = axis.dates[at[[0, -1]]]
    first, last = axis.text(ends, date_unit(axis.dates))  # its calendar's
    return (first, last), stride, (ends[0], ends[1])


def selected_axis(values: np.ndarray, dim: str) -> TimeAxis:
    """The Dataset's time coordinate as a `TimeAxis` (its dates and their calendar), to
    compare with other Datasets' (`io.xarray_join`).

    Args:
        values: the coordinate's values, as xarray decoded them.
        dim: its name.
    """
    if values.dtype.kind == "O" and values.size:
        dates, calendar = cftime_dates(values, dim)
        return TimeAxis(dim, dates, calendar)
    return TimeAxis(dim, _selected_dates(values, dim))


def _selected_dates(values: np.ndarray, dim: str) -> np.ndarray:
    """The Dataset's time coordinate as `TimeAxis.dates` counts it: numpy datetimes as
    they are, cftime dates (a `noleap` or `360_day` calendar, or `use_cftime=True`) from
    their calendar's 1970-01-01."""
    if values.dtype.kind == "M":
        return values
    if values.dtype.kind == "O" and values.size:
        return cftime_dates(values, dim)[0]
    raise ValueError(
        f"the Dataset's {dim!r} coordinate holds {values.dtype}, not dates: open it "
        f"with xr.open_zarr's default decode_times=True"
    )


@dataclass(frozen=True)
class StoredCoordinates:
    """The store's coordinates, read with failures redacted (`coordinate_values`).

    Args:
        arrays: the store's arrays by name.
        where: the store as messages name it.
        secrets: values kept out of messages.
    """

    arrays: Mapping[str, zarr.Array]
    where: str
    secrets: Sequence[str]

    def values(self, array: zarr.Array) -> np.ndarray:
        """A coordinate's values.

        Args:
            array: one of `arrays`.
        """
        return coordinate_values(array, self.where, self.secrets)


def _stored_positions(
    ds: Any, name: str, dim: str, read: StoredCoordinates, size: int
) -> tuple[np.ndarray | None, np.ndarray] | None:
    """(where each selected value of `dim` sits in the store's coordinate, the selected
    values), or None when the axis is whole."""
    stored = coordinate(read.arrays, dim, size)
    if ds.sizes[dim] == size and (dim not in ds.coords or stored is None):
        return None
    if stored is None or dim not in ds.coords:
        raise ValueError(
            f"the Dataset selects {ds.sizes[dim]} of {size} positions of {name!r} along "
            f"{dim!r}, which has no coordinate in the store to say which: select it whole"
        )
    values = read.values(stored)
    selected = np.asarray(ds[dim].values)
    if selected.size == size and np.array_equal(selected, values):
        return None
    return _positions(selected, values), selected


def level_selection(
    ds: Any, name: str, dim: str, read: StoredCoordinates, size: int
) -> list[Any] | None:
    """The level values selected along `dim`, in the Dataset's order (the loader yields
    them so, `core.level_selection`), None when the axis is whole in the stored order.

    Args:
        ds: the Dataset.
        name: the variable.
        dim: its level dimension.
        read: the store's coordinates.
        size: the stored length of `dim`.
    """
    found = _stored_positions(ds, name, dim, read, size)
    if found is None:
        return None
    at, selected = found
    if at is None:
        raise ValueError(
            f"the Dataset's {dim!r} holds values the store's {dim!r} coordinate does not "
            f"(interpolated?): select stored levels with ds.sel({dim}=[...])"
        )
    return selected.tolist()


def grid_selection(
    ds: Any, name: str, dim: str, read: StoredCoordinates, size: int
) -> tuple[int, int] | None:
    """(start, length) of a run of grid positions selected along `dim`, None when the axis
    is whole; an error for any other selection (a crop is a run).

    Args:
        ds: the Dataset.
        name: the variable.
        dim: one of its grid dimensions.
        read: the store's coordinates.
        size: the stored length of `dim`.
    """
    found = _stored_positions(ds, name, dim, read, size)
    if found is None:
        return None
    at, selected = found
    if at is None or at.size == 0 or (np.diff(at) != 1).any():
        raise ValueError(
            f"the Dataset selects {selected.size} of {size} positions of {name!r} along "
            f"{dim!r} that are not one run of the stored grid (a step, a list, a reversed "
            f"or interpolated axis): the loader crops the grid to one region; select a "
            f"range (ds.isel({dim}=slice(a, b)) or ds.sel({dim}=slice(x, y)))"
        )
    return int(at[0]), int(at.size)


def grid_region(
    ds: Any,
    names: Sequence[str],
    arrays: Mapping[str, zarr.Array],
    crops: Mapping[str, tuple[int, int]],
    spatial_dims: int,
) -> PatchSpec | None:
    """One crop of the trailing grid axes, shared by every variable (a Dataset selects a
    dimension the same way for all of its variables), or None when nothing is cropped.

    Args:
        ds: the Dataset.
        names: its data variables.
        arrays: the store's arrays by name.
        crops: grid dimension -> (start, length) of the run selected along it
            (`grid_selection`), for the cropped dimensions only.
        spatial_dims: the trailing grid axes.
    """
    if not crops:
        return None
    grids = {tuple(ds[name].dims[-spatial_dims:]) for name in names}
    if len(grids) > 1:
        raise ValueError(
            f"the Dataset crops the grid, but its variables lie on different grid dimensions "
            f"{sorted(grids)}: select variables on one grid to crop it"
        )
    (grid_dims,) = grids
    whole = arrays[names[0]].shape[-spatial_dims:]
    starts, lengths = zip(
        *(crops.get(str(dim), (0, length)) for dim, length in zip(grid_dims, whole, strict=True)),
        strict=True,
    )
    return PatchSpec(size=lengths, mode=REGION, origin=starts)
