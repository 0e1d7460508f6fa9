"""The latitude and longitude of a grid's points, found as xarray users store them: what the
forcings that depend on the place (`core.forcings`) are computed from.

Found, for the grid axes of the selected variables (their last `spatial_dims` dimensions,
named by Zarr v3 `dimension_names` or v2 `_ARRAY_DIMENSIONS`): an array over some of those
dimensions (in their order, with their lengths) that is latitude, resp. longitude, by
name (`latitude`/`lat`, `longitude`/`lon`: the 1-D coordinates of a regular grid) or by
CF attributes (`standard_name`, or `units` of `degrees_north`/`degrees_east`: the 2-D
coordinates of a projected grid, such as HRRR's). Its values are decoded as xarray decodes
them (`scale_factor`, `add_offset`) and returned shaped to broadcast against the grid (a
1-D latitude over the first of two grid axes comes as `(lat, 1)`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import zarr

from insitubatch_nodes.io.metadata.dimensions import coordinate_values, dimension_names

LATITUDE = "latitude"
LONGITUDE = "longitude"
_NAMES = {LATITUDE: ("latitude", "lat"), LONGITUDE: ("longitude", "lon")}
_UNITS = {
    LATITUDE: ("degrees_north", "degree_north", "degree_n", "degrees_n"),
    LONGITUDE: ("degrees_east", "degree_east", "degree_e", "degrees_e"),
}


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
                f"{_UNITS[kind][0]!r}) over the grid dimensions (dimension_names in Zarr v3, "
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
        if not _over_grid(array, grid):
            continue
        attrs = array.attrs
        units = attrs.get("units")
        if (
            name.lower() in _NAMES[kind]
            or attrs.get("standard_name") == kind
            or (isinstance(units, str) and units.strip().lower() in _UNITS[kind])
        ):
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
    values = np.asarray(coordinate_values(array, where, secrets), dtype=np.float64)
    attrs = array.attrs
    fill = attrs.get("_FillValue", attrs.get("missing_value"))
    if isinstance(fill, int | float):
        values = np.where(values == fill, np.nan, values)
    values = values * float(attrs.get("scale_factor", 1.0)) + float(attrs.get("add_offset", 0.0))
    dims = dimension_names(array) or ()
    shape = [1] * len(grid)
    for axis, (dim, _) in enumerate(grid):
        if dim in dims:
            shape[axis] = array.shape[dims.index(dim)]
    return values.reshape(shape)
