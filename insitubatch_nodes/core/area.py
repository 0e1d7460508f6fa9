"""A region by coordinate value, `area=(north, west, south, east)`, as anemoi and the CDS
write it: which grid points it keeps, and in which order a batch holds them.

The rule, in degrees: a grid point is inside when `south <= lat <= north` and
`(lon - west) mod 360 <= (east - west) mod 360` (`east - west >= 360` is the whole
circle), each edge inclusive within `EDGE_TOLERANCE`. Longitudes may be stored in
[0, 360) or [-180, 180): the rule only compares them modulo 360.

A batch keeps the stored order of latitudes (ascending or descending, as
`ds.sel(latitude=slice(north, south))` keeps them) and runs eastward from `west` in
longitude: a box across the stored seam (the dateline on a [-180, 180) grid, 0/360 on a
[0, 360) one) comes out as the stored end of the axis, then its start, as
`xr.concat([ds.sel(longitude=slice(west, None)), ds.sel(longitude=slice(None, east))])`
joins them.

An area is two picks (`AxisPick`): the rows inside (sorted: they are the stored order)
and the columns inside (sorted for the read, with the eastward order as the batch's,
`AxisPick.order`), so a read needs only the chunks the box touches and the gather puts
the columns in the batch's order as it takes them (`core.picked_takes`).

`AreaSelection` is the one place the result lives (`ZarrSource.area` when a loader is
planned, `Loader.area` after): a later stage that needs the batch's grid (forcings
computed from latitude and longitude, static fields cropped like the fields) takes
`latitudes`, `longitudes` (in the batch's order), `rows`, `columns` and `picks(...)` from
it, and never works the box out again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitubatch_nodes.core.axis_pick import AxisPick

EDGE_TOLERANCE = 1e-6  # degrees: a grid point this close outside an edge is inside
FULL_CIRCLE = 360.0


@dataclass(frozen=True)
class Area:
    """A box in degrees, as anemoi and the CDS write it.

    Args:
        north: the northern edge (latitude, inclusive).
        west: the western edge (longitude, inclusive); the batch's columns start here.
        south: the southern edge (latitude, inclusive), at most `north`.
        east: the eastern edge (longitude, inclusive), reached going east from `west`.
    """

    north: float
    west: float
    south: float
    east: float

    @classmethod
    def parse(cls, value: Any) -> Area:
        """An `Area` from `(north, west, south, east)` (a sequence of 4 numbers, an
        `Area`, or the text `"N,W,S,E"` the command line takes); refused by name when it
        is not 4 finite numbers or its north lies south of its south.

        Args:
            value: the area as given.
        """
        if isinstance(value, Area):
            return value
        given = value
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",")]
        if isinstance(value, bytes) or not isinstance(value, Sequence | np.ndarray):
            raise TypeError(
                f"area= must be (north, west, south, east) in degrees, e.g. (60, -10, 35, "
                f"30); got {given!r}"
            )
        try:
            numbers = [float(v) for v in value if not isinstance(v, bool)]
        except (TypeError, ValueError):
            numbers = []
        if len(numbers) != 4 or len(value) != 4 or not all(map(math.isfinite, numbers)):
            raise ValueError(
                f"area= must be 4 finite numbers (north, west, south, east) in degrees, e.g. "
                f"(60, -10, 35, 30); got {given!r}"
            )
        north, west, south, east = numbers
        if north < south:
            raise ValueError(
                f"area= {tuple(numbers)} has north {north} < south {south}: the order is "
                f"(north, west, south, east), as the CDS writes it; swap them"
            )
        return cls(north, west, south, east)

    @property
    def whole_circle(self) -> bool:
        """Whether the box spans every longitude (`east - west >= 360`)."""
        return self.east - self.west >= FULL_CIRCLE

    def to_list(self) -> list[float]:
        """`[north, west, south, east]`, plain floats (for states and reports)."""
        return [self.north, self.west, self.south, self.east]

    def rows(self, latitudes: np.ndarray) -> np.ndarray:
        """The positions of `latitudes` inside the box, in the stored order.

        Args:
            latitudes: the latitude coordinate's values, in degrees.
        """
        lat = np.asarray(latitudes, dtype=np.float64)
        inside = (lat >= self.south - EDGE_TOLERANCE) & (lat <= self.north + EDGE_TOLERANCE)
        return np.flatnonzero(inside)

    def columns(self, longitudes: np.ndarray) -> np.ndarray:
        """The positions of `longitudes` inside the box, eastward from `west` (how far
        east of it each lies, ties in the stored order).

        Args:
            longitudes: the longitude coordinate's values, in degrees ([0, 360),
                [-180, 180) or any other span: compared modulo 360).
        """
        lon = np.asarray(longitudes, dtype=np.float64)
        east_of_west = np.mod(lon - self.west, FULL_CIRCLE)
        # a point just west of `west` (within the tolerance) is on the edge: 0, not ~360
        east_of_west = np.where(east_of_west >= FULL_CIRCLE - EDGE_TOLERANCE, 0.0, east_of_west)
        if self.whole_circle:
            inside = np.ones(lon.shape, dtype=bool)
        else:
            width = float(np.mod(self.east - self.west, FULL_CIRCLE))
            inside = east_of_west <= width + EDGE_TOLERANCE
        positions = np.flatnonzero(inside)
        return positions[np.argsort(east_of_west[positions], kind="stable")]


@dataclass(frozen=True, eq=False)
class AreaSelection:
    """The grid points an area keeps of one latitude/longitude grid, as a batch holds them.

    Args:
        area: the box.
        rows: the latitude positions kept, in the stored order.
        columns: the longitude positions kept, eastward from the box's west edge.
        latitudes: the latitudes of `rows`, in the batch's order.
        longitudes: the longitudes of `columns`, in the batch's order (stored values).
    """

    area: Area
    rows: np.ndarray
    columns: np.ndarray
    latitudes: np.ndarray
    longitudes: np.ndarray

    @property
    def shape(self) -> tuple[int, int]:
        """(latitudes, longitudes) of the box's grid."""
        return int(self.rows.size), int(self.columns.size)

    def picks(self, latitude_axis: int, longitude_axis: int) -> tuple[AxisPick, AxisPick]:
        """The two picks that read the box from an array with these axes: the rows as
        they are stored, the columns sorted for the read with the eastward order as the
        batch's (`AxisPick.order`, empty when the two agree).

        Args:
            latitude_axis: the array's latitude axis (1 or more).
            longitude_axis: its longitude axis.
        """
        rows = AxisPick(latitude_axis, tuple(int(i) for i in self.rows))
        stored = np.sort(self.columns)
        places = np.searchsorted(stored, self.columns)
        order = () if np.array_equal(stored, self.columns) else tuple(int(p) for p in places)
        return rows, AxisPick(longitude_axis, tuple(int(i) for i in stored), order=order)

    def crop(self, values: np.ndarray, latitude_axis: int, longitude_axis: int) -> np.ndarray:
        """`values` on the whole grid (a static field, read whole once) cut to the box, in
        the batch's order: what the fields' picks read, for an array read otherwise.

        Args:
            values: an array with the grid's latitude and longitude axes.
            latitude_axis: its latitude axis (0 or more).
            longitude_axis: its longitude axis.
        """
        rows = np.take(values, self.rows, axis=latitude_axis)
        return np.take(rows, self.columns, axis=longitude_axis)

    def cropped_shape(
        self, shape: Sequence[int], latitude_axis: int, longitude_axis: int
    ) -> tuple[int, ...]:
        """`shape` with its latitude and longitude axes cut to the box's (`crop`'s shape).

        Args:
            shape: an array's shape on the whole grid.
            latitude_axis: its latitude axis.
            longitude_axis: its longitude axis.
        """
        cropped = list(shape)
        cropped[latitude_axis], cropped[longitude_axis] = self.shape
        return tuple(cropped)

    def record(self) -> dict[str, Any]:
        """The area as plain data (for a state's fingerprint): the box, the grid kept, and
        its first and last grid points."""
        return {
            "box": self.area.to_list(),
            "shape": list(self.shape),
            "rows": [int(self.rows[0]), int(self.rows[-1])],
            "columns": [int(self.columns[0]), int(self.columns[-1])],
        }


def select_area(
    area: Area, latitudes: np.ndarray, longitudes: np.ndarray, where: str = "the grid"
) -> AreaSelection:
    """The grid points `area` keeps of a grid with these 1-D coordinates; a box holding
    none of them is refused, naming the grid's extent.

    Args:
        area: the box.
        latitudes: the latitude coordinate's values, in degrees.
        longitudes: the longitude coordinate's values, in degrees.
        where: the coordinates' names, for messages.
    """
    lat = np.asarray(latitudes, dtype=np.float64)
    lon = np.asarray(longitudes, dtype=np.float64)
    rows, columns = area.rows(lat), area.columns(lon)
    if rows.size == 0 or columns.size == 0:
        missed = "latitude" if rows.size == 0 else "longitude"
        raise ValueError(
            f"area= {tuple(area.to_list())} holds no grid point of {where}: no {missed} is "
            f"inside (latitudes {_extent(lat)}, longitudes {_extent(lon)}); give a box that "
            f"overlaps the grid"
        )
    return AreaSelection(area, rows, columns, lat[rows], lon[columns])


def _extent(values: np.ndarray) -> str:
    if values.size == 0:
        return "none"
    return f"{float(values.min()):g} .. {float(values.max()):g}"
