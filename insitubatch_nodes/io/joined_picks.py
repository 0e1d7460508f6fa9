"""Levels and an area on a join: each store picks for the variables it holds.

A join's settings name levels and a box once for the whole source, but each store has
its own level coordinate, grid coordinates and layout. A list of levels applies to the
variables of every store that have a level axis (a surface store has none, and is not
an error); a mapping names variables, wherever they are; a box is found on each store's
own latitude and longitude (the grids are one, `io.joined_source` checked them), and
every variable and static field is cropped on its own axes. What a single store does
(`io.metadata.levels.level_picks`, `io.metadata.grid_coordinates.area_selection`) is
done store by store here, and the layouts come back with their picks. Without `levels=`,
stores whose level coordinates differ are aligned as `xr.merge` aligns them
(`merged_levels`, `core.level_join`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import zarr

from insitubatch_nodes.core.area import Area, AreaSelection
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.level_join import join_levels
from insitubatch_nodes.io.metadata.dimensions import coordinate, coordinate_values, dimension_names
from insitubatch_nodes.io.metadata.grid_coordinates import area_selection
from insitubatch_nodes.io.metadata.levels import (
    LevelsLike,
    check_level_names,
    level_axis,
    level_picks,
)


class StoreArrays(Protocol):
    """A store of a join as the picks read it: its arrays and how messages name it."""

    @property
    def arrays(self) -> Mapping[str, zarr.Array]: ...

    @property
    def where(self) -> str: ...

    @property
    def secrets(self) -> frozenset[str]: ...


def joined_level_picks(
    stores: Sequence[StoreArrays],
    owner: Mapping[str, int],
    layouts: dict[str, VariableLayout],
    levels: LevelsLike | None,
    spatial_dims: int,
) -> dict[str, VariableLayout]:
    """The layouts with each store's level picks (unchanged without `levels`), or an
    error naming a variable that is not selected, or saying none has a level axis.

    Args:
        stores: the join's stores, in order.
        owner: variable -> the position in `stores` of the store that holds it.
        layouts: the selected time-varying variables' layouts.
        levels: level values to keep (a list for every variable with a level axis, or
            variable -> values), or None.
        spatial_dims: the trailing grid axes (a level axis lies before them).
    """
    if levels is None:
        return layouts
    if isinstance(levels, Mapping):
        check_level_names(levels, layouts)
    picks: dict[str, Any] = {}
    for i in sorted({owner[n] for n in layouts}):
        store = stores[i]
        mine = {n: lay for n, lay in layouts.items() if owner[n] == i}
        if isinstance(levels, Mapping):
            wanted: LevelsLike = {n: v for n, v in levels.items() if n in mine}
        else:  # a list: the store's variables with a level axis (a surface store has none)
            wanted = levels
            mine = {
                n: lay
                for n, lay in mine.items()
                if level_axis(store.arrays, n, spatial_dims) is not None
            }
        if wanted and mine:
            picks |= level_picks(
                store.arrays, mine, wanted, spatial_dims, store.where, store.secrets
            )
    if not picks:
        raise ValueError(
            f"levels= is given, but none of {sorted(layouts)} has a level axis between "
            f"time and the grid (spatial_dims={spatial_dims})"
        )
    return {n: lay.with_picks([picks[n]]) if n in picks else lay for n, lay in layouts.items()}


def merged_levels(
    stores: Sequence[StoreArrays],
    owner: Mapping[str, int],
    layouts: Mapping[str, VariableLayout],
    join: str,
    spatial_dims: int,
) -> dict[str, list[Any]] | None:
    """Without `levels=`, the levels `xr.merge` aligns the variables on where stores hold
    a level dimension of one name with different values (`core.level_join`): variable ->
    values, for `joined_level_picks`; None where the stores agree (each variable keeps its
    store's levels). A level axis lies between time and the grid and has a coordinate.

    Args:
        stores: the join's stores, in order.
        owner: variable -> the position in `stores` of the store that holds it.
        layouts: the selected time-varying variables' layouts.
        join: `"exact"` or `"inner"`.
        spatial_dims: the trailing grid axes.
    """
    along: dict[str, list[str]] = {}  # level dimension -> the variables along it
    held: dict[str, dict[int, list[Any]]] = {}  # -> store -> its values
    for name in layouts:
        store = stores[owner[name]]
        array = store.arrays[name]
        dims = dimension_names(array) or ()
        for axis in range(1, array.ndim - spatial_dims):
            found = coordinate(store.arrays, dims[axis], array.shape[axis]) if dims else None
            if found is None:  # no coordinate: nothing to align by
                continue
            along.setdefault(dims[axis], []).append(name)
            mine = held.setdefault(dims[axis], {})
            if owner[name] not in mine:
                values = coordinate_values(found, store.where, store.secrets)
                mine[owner[name]] = values.tolist()
    levels: dict[str, list[Any]] = {}
    for dim, found_in in held.items():
        labelled = [(stores[i].where, values) for i, values in found_in.items()]
        remedy = f"pass levels= with {dim!r} values every store holds"
        kept = join_levels(dim, labelled, join, "stores", remedy)
        if kept is not None:
            levels |= {name: list(kept) for name in along[dim]}
    return levels or None


def joined_area_picks(
    stores: Sequence[StoreArrays],
    owner: Mapping[str, int],
    layouts: dict[str, VariableLayout],
    statics: Mapping[str, VariableLayout],
    area: Area | None,
) -> tuple[
    dict[str, VariableLayout],
    dict[str, tuple[int, int]],
    dict[str, tuple[int, int]],
    AreaSelection | None,
]:
    """The layouts cropped to `area` on each store's grid axes; the static fields' and
    the variables' (latitude, longitude) axes; and the area's selection. Without an area,
    the layouts as they are, no axes and None.

    Args:
        stores: the join's stores, in order.
        owner: variable or static field -> the position in `stores` of its store.
        layouts: the selected time-varying variables' layouts (with any level picks).
        statics: the selected static fields' layouts.
        area: a box of latitude and longitude, or None.
    """
    if area is None:
        return layouts, {}, {}, None
    boxed = None
    axes: dict[str, Any] = {}
    for i in sorted({owner[n] for n in [*layouts, *statics]}):
        store = stores[i]
        mine = {n: lay for n, lay in layouts.items() if owner[n] == i}
        mine_statics = [n for n in statics if owner[n] == i]
        selected, found = area_selection(
            store.arrays, mine, area, store.where, store.secrets, mine_statics
        )
        boxed = boxed or selected
        axes |= found
    assert boxed is not None
    layouts = {
        n: lay.with_picks(boxed.picks(axes[n].latitude_axis, axes[n].longitude_axis))
        for n, lay in layouts.items()
    }
    static_crops = {n: (axes[n].latitude_axis, axes[n].longitude_axis) for n in statics}
    area_axes = {n: (axes[n].latitude_axis, axes[n].longitude_axis) for n in layouts}
    return layouts, static_crops, area_axes, boxed
