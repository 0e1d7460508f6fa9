"""`levels=`: find each variable's level axis and its coordinate in the store, and pick
positions by value (`core.level_selection`).

The level axis is the one axis between the sample axis and the grid (the last
`spatial_dims` axes) that has a coordinate: the 1-D array named after its dimension
(`io.metadata.dimensions`), such as `level`, `pressure_level` or `isobaricInhPa`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import zarr

from insitubatch_nodes.core.axis_pick import AxisPick
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.level_selection import pick_levels
from insitubatch_nodes.io.metadata.dimensions import coordinate, coordinate_values, dimension_names

LevelsLike = Sequence[object] | Mapping[str, Sequence[object]]


def level_axis(
    arrays: Mapping[str, zarr.Array], name: str, spatial_dims: int
) -> tuple[int, str] | None:
    """`name`'s level axis and the name of its coordinate, or None for a variable with
    no axis between time and the grid.

    Args:
        arrays: the group's arrays by name.
        name: the variable.
        spatial_dims: the trailing grid axes.
    """
    array = arrays[name]
    middle = range(1, array.ndim - spatial_dims)
    if not middle:
        return None
    dims = dimension_names(array)
    found = []
    for axis in middle:
        dim = dims[axis] if dims is not None else None
        if dim is not None and coordinate(arrays, dim, array.shape[axis]) is not None:
            found.append((axis, dim))
    if len(found) != 1:
        named = "no dimension names" if dims is None else f"dimensions {list(dims)}"
        raise ValueError(
            f"levels= needs {name!r}'s level axis: the one axis between time and the grid "
            f"(spatial_dims={spatial_dims}) with a 1-D coordinate array of its name; it has "
            f"{named} and {len(found)} such axes. Write the level coordinate (xarray does), "
            f"or leave {name!r} out of levels="
        )
    return found[0]


def check_level_names(levels: Mapping[str, object], selected: Iterable[str]) -> None:
    """Refuse `levels=` given by variable when it names one the loader does not load: a
    typo would otherwise keep every level of the variable meant.

    Args:
        levels: variable -> level values, as the user gave them.
        selected: the selected time-varying variables' names.
    """
    names = sorted(selected)
    unknown = [name for name in levels if name not in names]
    if unknown:
        raise ValueError(
            f"levels= names variable(s) {unknown} that are not selected; the loader has {names}"
        )


def level_picks(
    arrays: Mapping[str, zarr.Array],
    layouts: Mapping[str, VariableLayout],
    levels: LevelsLike,
    spatial_dims: int,
    where: str = "the store",
    secrets: Iterable[str] = (),
) -> dict[str, AxisPick]:
    """The picks `levels` asks for: one list for every selected variable with a level
    axis, or a list per named variable.

    Args:
        arrays: the group's arrays by name.
        layouts: the selected variables.
        levels: level values (`[500, 850]`), or variable -> level values.
        spatial_dims: the trailing grid axes.
        where: the store's description for messages (credentials redacted).
        secrets: values known to be secret, kept out of a failed read's error.
    """
    if isinstance(levels, Mapping):
        check_level_names(levels, layouts)
        wanted = dict(levels)
        for name in wanted:
            if level_axis(arrays, name, spatial_dims) is None:
                raise ValueError(
                    f"levels= names {name!r}, which has no axis between time and the grid "
                    f"(shape {arrays[name].shape}, spatial_dims={spatial_dims}); leave it out"
                )
    else:
        wanted = {n: levels for n in layouts if level_axis(arrays, n, spatial_dims) is not None}
        if not wanted:
            raise ValueError(
                f"levels= is given, but none of {sorted(layouts)} has a level axis between "
                f"time and the grid (spatial_dims={spatial_dims})"
            )
    picks = {}
    for name, values in wanted.items():
        found = level_axis(arrays, name, spatial_dims)
        assert found is not None
        axis, dim = found
        stored = coordinate_values(arrays[dim], where, secrets)
        picks[name] = pick_levels(name, axis, dim, stored, values)
    return picks
