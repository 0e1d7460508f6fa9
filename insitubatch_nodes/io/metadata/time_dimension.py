"""Which dimension is time, by name, as xarray sees it, and the variables that do not fit.

The loader reads each variable along its first axis as time. That is only right when the
first axis is the dimension the store names time: a static field (orography, a land-sea
mask, shape (lat, lon)) read that way yields a latitude row per sample, silently when
latitude has as many values as time. So where the arrays name their dimensions (xarray
writes `_ARRAY_DIMENSIONS` in Zarr v2, `dimension_names` in v3), time is found by name:

1. the dimension of the store's time coordinate, as xarray decodes one: a 1-D array named
   after its own dimension holding datetime64, or numbers with CF units ("hours since
   ..."), or marked `axis: T` or `standard_name: time` (`valid_time` in the CDS's ERA5);
2. else a dimension with a usual time name (`time`, `valid_time`, `date`, `dates`);
3. else the first dimension of the variables, when they all share it (a store of samples
   with no dates).

A variable without that dimension is a static field (`core.static_fields`): read once,
whole, and only on the fields' own grid (`check_static_grid`); one with time elsewhere
than first is refused by name. Arrays that name no dimensions (plain zarr-python
arrays) say nothing about time: their axis 0 is time, as it always was.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import zarr

from insitubatch_nodes.core.cf_time import SINCE
from insitubatch_nodes.io.metadata.dimensions import dimension_names

TIME_NAMES = ("time", "valid_time", "date", "dates")


def is_time_coordinate(name: str, array: zarr.Array) -> bool:
    """Whether `array` is a time coordinate xarray would decode as dates: 1-D, named after
    its dimension, with datetime64 values, CF time units, or attributes that say time.

    Args:
        name: the array's name in its group.
        array: the opened array.
    """
    if array.ndim != 1 or dimension_names(array) not in (None, (name,)):
        return False
    attrs = array.attrs
    units = attrs.get("units")
    return (
        array.dtype.kind == "M"
        or (isinstance(units, str) and SINCE.match(units) is not None)
        or attrs.get("axis") == "T"
        or attrs.get("standard_name") == "time"
    )


def named_time(arrays: Mapping[str, zarr.Array], variables: Sequence[str]) -> str | None:
    """The dimension the store names time for `variables` (rules 1 and 2 of the module's
    note), or None when nothing names one.

    Args:
        arrays: the group's arrays by name.
        variables: the selected variables.
    """
    used = [d for n in variables for d in dimension_names(arrays[n]) or ()]
    coordinates = [  # one naming no dimension is a coordinate only of a dimension in use
        n
        for n, a in sorted(arrays.items())
        if is_time_coordinate(n, a) and (n in used or dimension_names(a) is not None)
    ]
    in_use = [c for c in coordinates if c in used]
    if len(in_use) > 1:  # the one the variables give first (a forecast's reference time)
        firsts = {dims[0] for n in variables if (dims := dimension_names(arrays[n]))}
        in_use = [c for c in in_use if c in firsts] or in_use
    candidates = in_use or coordinates
    if len(candidates) == 1:
        return candidates[0]
    if len(candidates) > 1:
        raise ValueError(
            f"the store has several time coordinates {candidates} and the selected variables "
            f"{list(variables)} do not say which is theirs; select variables that share one"
        )
    return next((t for t in TIME_NAMES if t in used), None)


def time_dimension(arrays: Mapping[str, zarr.Array], variables: Sequence[str]) -> str | None:
    """The name of `variables`' time dimension, checked: every one that names its
    dimensions has it first; None when none of them names its dimensions (axis 0 is time).

    Args:
        arrays: the group's arrays by name.
        variables: the selected time-varying variables (static fields split off first,
            `static_variables`).
    """
    named = {n: dims for n in variables if (dims := dimension_names(arrays[n])) is not None}
    if not named:
        return None
    time = named_time(arrays, variables)
    if time is None:
        firsts = {dims[0] for dims in named.values()}
        if len(firsts) > 1:
            listed = ", ".join(f"{n!r}: {dims}" for n, dims in named.items())
            raise ValueError(
                f"the selected variables name different first dimensions ({listed}), and the "
                f"store has no time coordinate to say which is time; select variables that "
                f"share their first dimension (their time), or write a time coordinate"
            )
        return firsts.pop()
    for name, dims in named.items():
        if dims[0] != time:
            raise ValueError(
                f"variable {name!r} has dimensions {dims}: its time dimension {time!r} is not "
                f"its first, and the loader reads time as each variable's first axis; store it "
                f"with time first (ds[{name!r}].transpose({time!r}, ...).to_zarr(...)), or "
                f"leave it out of variables="
            )
    return time


def has_time(arrays: Mapping[str, zarr.Array], name: str, time: str | None) -> bool:
    """Whether array `name` can be read along `time` (the default choice of variables
    leaves out the others, as it leaves out 1-D coordinates): it names no dimensions, or
    names `time` among them.

    Args:
        arrays: the group's arrays by name.
        name: the array.
        time: the time dimension (`named_time`), or None when nothing names one.
    """
    dims = dimension_names(arrays[name])
    return time is None or dims is None or time in dims


def static_variables(arrays: Mapping[str, zarr.Array], variables: Sequence[str]) -> list[str]:
    """The static fields among `variables`: those that name their dimensions, none of
    them the time dimension the store names (`named_time`); empty when nothing names
    time (then every variable is read along its axis 0, as it always was).

    Args:
        arrays: the group's arrays by name.
        variables: the selected variables.
    """
    time = named_time(arrays, variables)
    if time is None:
        return []
    return [
        n
        for n in variables
        if (dims := dimension_names(arrays[n])) is not None and time not in dims
    ]


def check_static_grid(
    arrays: Mapping[str, zarr.Array],
    statics: Sequence[str],
    fields: Sequence[str],
    spatial_dims: int,
) -> None:
    """Refuse a static field that is not on the fields' grid: it must be the grid itself,
    its dimensions the fields' last `spatial_dims` ones by name, of the same sizes (a
    batch gives it beside them, cell for cell). Beside a field that names no dimensions it
    is refused too: sizes alone cannot tell a square grid from its transpose.

    Args:
        arrays: the group's arrays by name.
        statics: the static fields (`static_variables`).
        fields: the time-varying variables beside them (at least one).
        spatial_dims: the trailing grid axes.
    """
    if statics and not fields:
        raise ValueError(
            f"the selected variables {list(statics)} are all static fields (no time "
            f"dimension): the loader samples along time, so select at least one "
            f"time-varying variable beside them"
        )
    for name in statics:
        dims, shape = dimension_names(arrays[name]) or (), tuple(arrays[name].shape)
        for field in fields:
            field_dims = dimension_names(arrays[field])
            sample_shape = tuple(arrays[field].shape)[1:]  # time is first (checked)
            grid_shape = sample_shape[max(0, len(sample_shape) - spatial_dims) :]
            if field_dims is None:  # only names tell a swapped square grid
                raise ValueError(
                    f"static field {name!r} names its dimensions {dims} and {field!r} names "
                    f"none (a plain zarr array): the loader cannot tell whether the static's "
                    f"axes are {field!r}'s grid in the same order; name {field!r}'s "
                    f"dimensions (as xarray's to_zarr writes them), or leave {name!r} out of "
                    f"variables="
                )
            grid_dims = field_dims[1:][-len(grid_shape) :]
            if len(dims) != spatial_dims or dims != grid_dims:
                raise ValueError(
                    f"static field {name!r} has dimensions {dims}, and the grid of {field!r} "
                    f"is {grid_dims} (its last "
                    f"spatial_dims={spatial_dims} dimensions): a static field is given "
                    f"beside the fields cell for cell, so it must be their grid; store it "
                    f"on their grid with their dimension names (ds[{name!r}].rename(...) "
                    f"if only the names differ, else regrid it), or leave it out of "
                    f"variables="
                )
            if shape != grid_shape:
                raise ValueError(
                    f"static field {name!r} has shape {shape} on {dims}, and {field!r}'s "
                    f"grid is {grid_shape}: another grid (another resolution, or a region "
                    f"of it); regrid it onto the fields' grid and store it beside them, "
                    f"or leave it out of variables="
                )
