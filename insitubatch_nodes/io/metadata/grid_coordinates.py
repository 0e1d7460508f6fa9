"""The latitude and longitude of a grid, found as xarray users store them: the axes and
coordinates `area=` selects its box on (`core.area`), and the decoded coordinates the
forcings that depend on the place are computed from (`core.forcings`).

For `area=`, an axis is the latitude (longitude) axis when its dimension has a 1-D
coordinate array (`io.metadata.dimensions`) that CF or common usage marks as one:
`standard_name` `latitude` (`longitude`), `units` `degrees_north` (`degrees_east`) or a
CF spelling of it, or the name `latitude`/`lat` (`longitude`/`lon`). A grid whose latitude
and longitude are 2-D arrays (curvilinear: rotated poles, Lambert grids such as HRRR's)
has no box of rows and columns, and is refused by name.

The forcings take 2-D coordinates too (a formula needs each point's place, not a box):
`read_grid_coordinates` finds, for the grid axes of the selected variables (their last
`spatial_dims` dimensions), an array over some of those dimensions (in their order, with
their lengths) that is latitude, resp. longitude, as above: the 1-D coordinate named after
a grid dimension first, then any such array (the 2-D coordinates of a projected grid).
Its values are decoded as xarray decodes them (`scale_factor`, `add_offset`, masked values
NaN) and returned shaped to broadcast against the grid (a 1-D latitude over the first of
two grid axes comes as `(lat, 1)`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import zarr

from insitubatch_nodes.core.area import Area, AreaSelection, select_area
from insitubatch_nodes.core.decoded_values import decode_values
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.io.metadata.cf_attributes import read_cf_decoding
from insitubatch_nodes.io.metadata.dimensions import coordinate, coordinate_values, dimension_names

LATITUDE = "latitude"
LONGITUDE = "longitude"
_NAMES = {LATITUDE: ("latitude", "lat"), LONGITUDE: ("longitude", "lon")}
_UNITS = {  # the CF spellings of degrees north and east
    LATITUDE: {"degrees_north", "degree_north", "degree_n", "degrees_n", "degreen", "degreesn"},
    LONGITUDE: {"degrees_east", "degree_east", "degree_e", "degrees_e", "degreee", "degreese"},
}
_UNIT_SHOWN = {LATITUDE: "degrees_north", LONGITUDE: "degrees_east"}  # in messages


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
    units = str(attrs.get("units", "")).strip().lower()
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


def decoded_coordinate(
    name: str, array: zarr.Array, where: str, secrets: Iterable[str] = ()
) -> np.ndarray:
    """A coordinate's values in degrees as `xr.open_zarr` shows them (float64): packed
    coordinates (int16 tenths of a degree with a `scale_factor`) unpacked and masked values
    NaN by the same decoding as the fields (`io.metadata.cf_attributes`), so that a box is
    cut, and the sun placed, on the degrees a user sees, never on stored integers.

    Args:
        name: the coordinate's name, for messages.
        array: the coordinate array.
        where: the store's description for messages (credentials redacted).
        secrets: values known to be secret, kept out of a failed read's error.
    """
    stored = coordinate_values(array, where, secrets)
    decoded = decode_values(np.ascontiguousarray(stored), read_cf_decoding(name, array))
    return np.asarray(decoded, dtype=np.float64)


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
    latitudes = decoded_coordinate(lat, arrays[lat], where, secrets)
    longitudes = decoded_coordinate(lon, arrays[lon], where, secrets)
    selection = select_area(area, latitudes, longitudes, f"{lat!r} and {lon!r} of {where}")
    return selection, axes


@dataclass(frozen=True)
class GridCoordinates:
    """A grid's latitudes and longitudes in degrees (float64), each shaped to broadcast
    against the grid (length 1 along the axes it does not vary on).

    Args:
        latitude: the latitudes.
        longitude: the longitudes (east positive, any convention: [0, 360) or [-180, 180)).
        names: the arrays they were read from, for messages.
    """

    latitude: np.ndarray
    longitude: np.ndarray
    names: tuple[str, str]

    @property
    def nbytes(self) -> int:
        return int(self.latitude.nbytes + self.longitude.nbytes)


def read_grid_coordinates(
    arrays: Mapping[str, zarr.Array],
    variables: Sequence[str],
    spatial_dims: int,
    where: str,
    secrets: Iterable[str] = (),
) -> GridCoordinates:
    """The latitude and longitude of the selected variables' grid, or an error saying what
    was looked for and how to provide it.

    Args:
        arrays: the group's arrays by name.
        variables: the selected variables.
        spatial_dims: the trailing grid axes of each variable.
        where: the store's description for messages (credentials redacted).
        secrets: values known to be secret, kept out of a failed read's error.
    """
    grid = _grid_dimensions(arrays, variables, spatial_dims)
    found = {}
    for kind in (LATITUDE, LONGITUDE):
        name = _find(arrays, grid, kind) if grid is not None else None
        if name is None:
            dims = "unnamed" if grid is None else [d for d, _ in grid]
            raise ValueError(
                f"{where} has no {kind} for the grid axes {dims} of {list(variables)}: it "
                f"would be an array named {' or '.join(repr(n) for n in _NAMES[kind])} over a "
                f"grid dimension, or one with standard_name {kind!r} (or units "
                f"{_UNIT_SHOWN[kind]!r}) over the grid dimensions (dimension_names in Zarr v3, "
                f"_ARRAY_DIMENSIONS in v2, as xarray writes them); write it, or leave out those "
                f"forcings"
            )
        assert grid is not None
        found[kind] = (name, _decoded(arrays[name], name, grid, where, secrets))
    (lat_name, latitude), (lon_name, longitude) = found[LATITUDE], found[LONGITUDE]
    if not np.all(np.isfinite(latitude)) or np.abs(latitude).max() > 90.0:
        raise ValueError(
            f"the latitude {lat_name!r} of {where} holds values that are not latitudes in "
            f"degrees (non-finite, or beyond +-90); fix the coordinate, or leave out the "
            f"forcings that depend on the place"
        )
    if not np.all(np.isfinite(longitude)):
        raise ValueError(
            f"the longitude {lon_name!r} of {where} holds non-finite values; fix the "
            f"coordinate, or leave out the forcings that depend on the place"
        )
    return GridCoordinates(latitude, longitude, (lat_name, lon_name))


def _grid_dimensions(
    arrays: Mapping[str, zarr.Array], variables: Sequence[str], spatial_dims: int
) -> list[tuple[str, int]] | None:
    """The grid axes' (name, length), when the variables name them alike; else None."""
    grids = set()
    for name in variables:
        array = arrays[name]
        dims = dimension_names(array)
        if dims is None or spatial_dims == 0:
            return None
        grids.add(tuple(zip(dims[-spatial_dims:], array.shape[-spatial_dims:], strict=True)))
    return list(grids.pop()) if len(grids) == 1 else None


def _find(arrays: Mapping[str, zarr.Array], grid: list[tuple[str, int]], kind: str) -> str | None:
    """The name of the array holding `kind` over the grid's dimensions: a 1-D coordinate
    named after a grid dimension first, then any array with the name or CF attributes."""
    grid_names = [d for d, _ in grid]
    for dim in grid_names:
        if dim.lower() in _NAMES[kind] and _over_grid(arrays.get(dim), grid):
            return dim
    for name in sorted(arrays):
        array = arrays[name]
        if _over_grid(array, grid) and coordinate_kind(name, array) == kind:
            return name
    return None


def _over_grid(array: zarr.Array | None, grid: list[tuple[str, int]]) -> bool:
    """Whether `array` lies over some of the grid's dimensions, in their order and with
    their lengths."""
    if array is None:
        return False
    dims = dimension_names(array)
    if dims is None or not dims:
        return False
    lengths = dict(grid)
    order = [d for d, _ in grid]
    if any(d not in lengths for d in dims) or len(set(dims)) != len(dims):
        return False
    positions = [order.index(d) for d in dims]
    if positions != sorted(positions):
        return False
    return all(array.shape[i] == lengths[d] for i, d in enumerate(dims))


def _decoded(
    array: zarr.Array,
    name: str,
    grid: list[tuple[str, int]],
    where: str,
    secrets: Iterable[str],
) -> np.ndarray:
    """The coordinate's values as xarray shows them (unpacked, masked values NaN), in
    degrees, shaped to broadcast against the grid."""
    values = decoded_coordinate(name, array, where, secrets)
    dims = dimension_names(array) or ()
    shape = [1] * len(grid)
    for axis, (dim, _) in enumerate(grid):
        if dim in dims:
            shape[axis] = array.shape[dims.index(dim)]
    return values.reshape(shape)
