"""`area=`: find each variable's latitude and longitude axes and their coordinates in the
store, and select the box on them (`core.area`).

An axis is the latitude (longitude) axis when its dimension has a 1-D coordinate array
(`io.metadata.dimensions`) that CF or common usage marks as one: `standard_name`
`latitude` (`longitude`), `units` `degrees_north` (`degrees_east`) or a CF spelling of
it, or the name `latitude`/`lat` (`longitude`/`lon`). A grid whose latitude and longitude
are 2-D arrays (curvilinear: rotated poles, Lambert grids such as HRRR's) has no box of
rows and columns, and is refused by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import zarr

from insitubatch_nodes.core.area import Area, AreaSelection, select_area
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.io.metadata.dimensions import coordinate, coordinate_values, dimension_names

LATITUDE = "latitude"
LONGITUDE = "longitude"
_NAMES = {LATITUDE: ("latitude", "lat"), LONGITUDE: ("longitude", "lon")}
_UNITS = {  # the CF spellings of degrees north and east
    LATITUDE: {"degrees_north", "degree_north", "degree_n", "degrees_n", "degreen", "degreesn"},
    LONGITUDE: {"degrees_east", "degree_east", "degree_e", "degrees_e", "degreee", "degreese"},
}


@dataclass(frozen=True)
class GridAxes:
    """Where a variable keeps latitude and longitude.

    Args:
        latitude_axis: the array's latitude axis.
        latitude: the latitude coordinate's name.
        longitude_axis: its longitude axis.
        longitude: the longitude coordinate's name.
    """

    latitude_axis: int
    latitude: str
    longitude_axis: int
    longitude: str


def coordinate_kind(name: str, array: zarr.Array) -> str | None:
    """`LATITUDE` or `LONGITUDE` when the coordinate array `name` is one (by its
    `standard_name`, its `units`, or its name), else None.

    Args:
        name: the array's name.
        array: the array.
    """
    attrs = array.attrs
    standard = str(attrs.get("standard_name", "")).lower()
    units = str(attrs.get("units", "")).lower()
    for kind in (LATITUDE, LONGITUDE):
        if standard == kind or units in _UNITS[kind] or name.lower() in _NAMES[kind]:
            return kind
    return None


def grid_axes(arrays: Mapping[str, zarr.Array], name: str, first_axis: int = 1) -> GridAxes:
    """`name`'s latitude and longitude axes and coordinates, or why it has none.

    Args:
        arrays: the group's arrays by name.
        name: the variable.
        first_axis: the first axis that may be one (1: axis 0 is time; 0 for a static
            field, which has none).
    """
    array = arrays[name]
    dims = dimension_names(array)
    if dims is None:
        raise ValueError(
            f"area= needs the latitude and longitude axes of {name!r}, but it names no "
            f"dimensions (_ARRAY_DIMENSIONS in Zarr v2, dimension_names in v3); write the "
            f"store with xarray (to_zarr names them), or leave area= out"
        )
    found: dict[str, tuple[int, str]] = {}
    for axis in range(first_axis, array.ndim):
        coord = coordinate(arrays, dims[axis], array.shape[axis])
        if coord is not None and (kind := coordinate_kind(dims[axis], coord)) is not None:
            found.setdefault(kind, (axis, dims[axis]))
    if LATITUDE in found and LONGITUDE in found:
        (lat_axis, lat), (lon_axis, lon) = found[LATITUDE], found[LONGITUDE]
        return GridAxes(lat_axis, lat, lon_axis, lon)
    curvilinear = [
        other
        for other, coord in arrays.items()
        if coord.ndim == 2
        and coordinate_kind(other, coord) is not None
        and set(dimension_names(coord) or ()) <= set(dims)
    ]
    if curvilinear:
        raise ValueError(
            f"area= needs 1-D latitude and longitude coordinates, but {name!r} (dimensions "
            f"{list(dims)}) lies on a curvilinear grid: {sorted(curvilinear)} are 2-D. A box "
            f"of latitude and longitude is not a box of its rows and columns; crop by "
            f"position with patches=PatchSpec(..., mode='region') instead"
        )
    missing = " or ".join(kind for kind in (LATITUDE, LONGITUDE) if kind not in found)
    raise ValueError(
        f"area= needs the latitude and longitude coordinates of {name!r}, but none of its "
        f"dimensions {list(dims[first_axis:])} has a 1-D {missing} coordinate (an array "
        f"named after the dimension, such as latitude/lat with units degrees_north, "
        f"longitude/lon with units degrees_east); write the coordinates, or leave area= out"
    )


def area_selection(
    arrays: Mapping[str, zarr.Array],
    layouts: Mapping[str, VariableLayout],
    area: Area,
    where: str = "the store",
    secrets: Iterable[str] = (),
    statics: Iterable[str] = (),
) -> tuple[AreaSelection, dict[str, GridAxes]]:
    """The grid points `area` keeps, and each selected variable's grid axes (the static
    fields' too). Every variable is cropped, so every one needs the same latitude and
    longitude coordinates.

    Args:
        arrays: the group's arrays by name.
        layouts: the selected time-varying variables.
        area: the box.
        where: the store's description for messages (credentials redacted).
        secrets: values known to be secret, kept out of a failed read's error.
        statics: the selected static fields (no time axis: any axis may be a grid one).
    """
    axes = {name: grid_axes(arrays, name) for name in layouts}
    axes |= {name: grid_axes(arrays, name, first_axis=0) for name in statics}
    grids = {(a.latitude, a.longitude) for a in axes.values()}
    if len(grids) != 1:
        raise ValueError(
            "area= crops every selected variable, but they lie on different grids: "
            + ", ".join(f"{n} on ({a.latitude}, {a.longitude})" for n, a in axes.items())
            + "; select variables that share their latitude and longitude coordinates"
        )
    lat, lon = grids.pop()
    latitudes = coordinate_values(arrays[lat], where, secrets)
    longitudes = coordinate_values(arrays[lon], where, secrets)
    selection = select_area(area, latitudes, longitudes, f"{lat!r} and {lon!r} of {where}")
    return selection, axes
