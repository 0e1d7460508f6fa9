"""Forcings: fields a model takes beside the stored ones, computed from each sample's valid
time and the grid's latitude and longitude (`build_loader(forcings=[...])`).

The registry (`core.forcing_names`) names each forcing and what it needs (the time, the
grid, real dates); `forcing_values` computes a batch's forcings at once, vectorised over
its samples and steps (the sun's place in numpy on the host, one per instant; the grid in
numpy on the host, or torch on the batch's accelerator). The formulas are in
`core.solar_geometry` and `core.progress_features`; each result is a compact array that
broadcasts against `(batch, steps, *grid)` (e.g. year progress `(batch, steps, 1, 1)`),
which the node expands to that shape without copying.

Calendars: on real dates (`proleptic_gregorian`, `standard`, `julian`) every forcing is
defined, counted in seconds since 1970-01-01 UTC (Julian dates shifted to it). On a
model's calendar (`noleap`, `all_leap`, `360_day`) the sun's place on a date is not
defined (the calendar's year is not the Earth's orbit), so `cos_solar_zenith_angle` and
`toa_incident_solar_radiation` are refused by name; the year progress is the fraction of
the calendar's own year (`core.progress_features`), and the day progress, whose days are
86400 s in every calendar, is GraphCast's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitubatch_nodes.core import progress_features, solar_geometry
from insitubatch_nodes.core.forcing_names import (
    COS_LATITUDE,
    COS_LONGITUDE,
    COS_SOLAR_ZENITH_ANGLE,
    DAY_PROGRESS_COS,
    DAY_PROGRESS_SIN,
    FORCINGS,
    SIN_LONGITUDE,
    TOA_INCIDENT_SOLAR_RADIATION,
    YEAR_PROGRESS_COS,
    YEAR_PROGRESS_SIN,
    group_forcings,
)
from insitubatch_nodes.core.longitude_columns import LongitudeColumns, longitude_columns

IDLE_BATCHES = 2  # host batches whose forcings' memory `ForcingsNode` keeps for reuse


def check_calendar(names: Iterable[str], calendar: str) -> None:
    """Refuse, by name, the forcings that need real dates on a model's calendar.

    Args:
        names: the checked forcing names.
        calendar: the time coordinate's calendar (`core.calendars.calendar_name`).
    """
    if calendar in progress_features.REAL_CALENDARS:
        return
    refused = [n for n in names if FORCINGS[n].real_dates]
    if refused:
        raise ValueError(
            f"the forcings {refused} need real dates (the sun's place on each), and the "
            f"time coordinate counts in the {calendar!r} calendar, a model's own whose "
            f"year is not the Earth's orbit; leave them out (year and day progress are "
            f"defined on it), or compute them on your model's orbit in your training step"
        )


def instant_seconds(dates: np.ndarray, calendar: str) -> np.ndarray:
    """Each date as float64 seconds: since 1970-01-01 UTC on calendars of real dates
    (Julian dates shifted from their own 1970-01-01), since the calendar's own 1970-01-01
    on a model's (what its year and day progress count from). NaT becomes NaN.

    Args:
        dates: `TimeAxis.dates` (numpy datetimes counted in `calendar`).
        calendar: the calendar they count in.
    """
    micro = np.asarray(dates).astype("M8[us]")
    seconds = micro.astype(np.int64).astype(np.float64) / 1e6
    seconds[np.isnat(micro)] = np.nan
    if calendar == "julian":
        seconds += progress_features.JULIAN_EPOCH_SECONDS
    return seconds


@dataclass(frozen=True)
class GridTerms:
    """The grid's coordinates as the formulas take them, arrays of one namespace that
    broadcast against `(batch, steps, *grid)`: shaped `(1 or batch, 1, *g)` with each `g`
    the grid's length along an axis the coordinate varies on, else 1.

    Args:
        latitude_sin: sine of latitude (float32).
        latitude_cos: cosine of latitude (float32, >= 0).
        longitude_radians: longitude in radians (float32).
        longitude_degrees: longitude in degrees (float64, for the day progress).
        longitude_columns: on a grid whose latitude varies along the axes before the
            last and longitude along the last only, the same for every sample, its
            columns (`core.longitude_columns`): the sun's forcings are then computed by
            rows (`solar_geometry.cos_zenith_by_rows`, `hour_insolation_by_rows`). None
            on any other grid (2-D coordinates, each sample's crop at patches), or where
            too coarse to gain.
    """

    latitude_sin: Any
    latitude_cos: Any
    longitude_radians: Any
    longitude_degrees: Any
    longitude_columns: LongitudeColumns | None = None


def grid_terms(
    latitude: np.ndarray, longitude: np.ndarray, to_array: Callable[[np.ndarray], Any]
) -> GridTerms:
    """The `GridTerms` of coordinates in degrees (numpy, float64, already shaped to
    broadcast against the grid with the leading batch and step axes).

    Args:
        latitude: latitudes in degrees.
        longitude: longitudes in degrees.
        to_array: a numpy array -> an array of the namespace the terms are in.
    """
    lat = np.deg2rad(np.asarray(latitude, dtype=np.float64))
    lon = np.asarray(longitude, dtype=np.float64)
    columns = None
    if lat.shape[-1] == 1 and math.prod(lon.shape[:-1]) == 1:  # rows and columns
        columns = longitude_columns(lon, solar_geometry.ACCUMULATION_RADIANS, to_array)
    return GridTerms(
        latitude_sin=to_array(np.sin(lat).astype(np.float32)),
        latitude_cos=to_array(np.clip(np.cos(lat), 0.0, None).astype(np.float32)),
        longitude_radians=to_array(np.deg2rad(lon).astype(np.float32)),
        longitude_degrees=to_array(lon),
        longitude_columns=columns,
    )


def forcing_values(
    xp: Any,
    names: Iterable[str],
    seconds: np.ndarray | None,
    calendar: str,
    grid: GridTerms | None,
    to_array: Callable[[np.ndarray], Any],
    grid_rank: int,
    empty: Callable[[tuple[int, ...]], np.ndarray] | None = None,
) -> dict[str, Any]:
    """Each forcing of `names` for a batch, as a compact array of `xp` (float32) that
    broadcasts against `(batch, steps, *grid)`.

    Args:
        xp: the namespace the grid terms and results are in (numpy, or torch).
        names: the checked forcing names.
        seconds: (batch, steps) float64 instants (`instant_seconds`), or None when no
            forcing of `names` needs the time.
        calendar: the calendar `seconds` count in.
        grid: the grid's terms, or None when none of `names` needs the grid.
        to_array: a numpy array -> an array of `xp` where the grid terms are.
        grid_rank: the grid's axes (the per-instant terms get as many trailing axes).
        empty: with numpy, a shape -> an uninitialised float32 array where a forcing that
            varies over the whole grid is written (memory reused: fresh pages cost a
            first touch as large as the arithmetic), or None for new arrays.
    """
    names = list(names)
    rank = grid_rank
    if seconds is not None:
        shaped = np.asarray(seconds, dtype=np.float64).reshape(*np.shape(seconds), *([1] * rank))
    values: dict[str, Any] = {}
    sun_fields = (
        (
            COS_SOLAR_ZENITH_ANGLE,
            0.0,
            solar_geometry.cos_zenith,
            solar_geometry.cos_zenith_by_rows,
        ),
        (
            TOA_INCIDENT_SOLAR_RADIATION,
            -solar_geometry.ACCUMULATION_SECONDS / 2,
            solar_geometry.hour_insolation,
            solar_geometry.hour_insolation_by_rows,
        ),
    )  # (name, where the sun is placed from the valid time (s), on any grid, on rows and columns)
    wanted = [field for field in sun_fields if field[0] in names]
    suns: Any = ()
    if wanted:  # the sun at every instant each field places it: one pass, one copy to a device
        placed = np.stack([shaped + shift for _, shift, _, _ in wanted])
        suns = to_array(solar_geometry.sun_positions(placed).stacked().astype(np.float32))
    for (name, _, on_points, on_rows), sun in zip(wanted, suns, strict=True):
        assert grid is not None
        latitude = (grid.latitude_sin, grid.latitude_cos)
        if grid.longitude_columns is None:
            values[name] = on_points(xp, sun, *latitude, grid.longitude_radians)
        else:
            out = _whole_grid(empty, np.shape(seconds), grid)
            values[name] = on_rows(xp, sun, *latitude, grid.longitude_columns, out=out)
    if YEAR_PROGRESS_SIN in names or YEAR_PROGRESS_COS in names:
        progress = progress_features.year_progress(shaped, calendar)
        phase = to_array(progress_features.progress_phase(progress))
        _sin_cos(xp, phase, YEAR_PROGRESS_SIN, YEAR_PROGRESS_COS, names, values)
    if DAY_PROGRESS_SIN in names or DAY_PROGRESS_COS in names:
        assert grid is not None
        fraction = to_array(progress_features.day_fraction(shaped))
        progress = progress_features.day_progress(xp, fraction, grid.longitude_degrees)
        phase = progress_features.progress_phase(xp.asarray(progress, dtype=xp.float32))
        _sin_cos(xp, phase, DAY_PROGRESS_SIN, DAY_PROGRESS_COS, names, values)
    if COS_LATITUDE in names:
        assert grid is not None
        values[COS_LATITUDE] = xp.asarray(grid.latitude_cos, copy=True)  # never the cache
    if SIN_LONGITUDE in names or COS_LONGITUDE in names:
        assert grid is not None
        _sin_cos(xp, grid.longitude_radians, SIN_LONGITUDE, COS_LONGITUDE, names, values)
    return {name: values[name] for name in names}


def _whole_grid(
    empty: Callable[[tuple[int, ...]], np.ndarray] | None,
    instants: tuple[int, ...],
    grid: GridTerms,
) -> np.ndarray | None:
    """A (batch, steps, *grid) array from `empty`, or None without it."""
    if empty is None:
        return None
    shape = np.broadcast_shapes(tuple(grid.latitude_sin.shape), tuple(grid.longitude_radians.shape))
    return empty((*instants, *shape[2:]))


def _sin_cos(
    xp: Any, phase: Any, sin_name: str, cos_name: str, names: list[str], values: dict[str, Any]
) -> None:
    """The sine and cosine of `phase`, under the names asked for."""
    if sin_name in names:
        values[sin_name] = xp.sin(phase)
    if cos_name in names:
        values[cos_name] = xp.cos(phase)


def needs(names: Iterable[str]) -> tuple[bool, bool]:
    """Whether any of `names` needs the time coordinate, and whether any needs the grid's.

    Args:
        names: checked forcing names.
    """
    chosen = [FORCINGS[n] for n in names]
    return any(f.needs_time for f in chosen), any(f.needs_grid for f in chosen)


@dataclass(frozen=True, eq=False)
class ForcingPlan:
    """What a loader's forcings are computed from, decided once when it is built.

    Args:
        names: the checked forcing names, in the order given.
        seconds: per stored step of the sample axis, its valid time as `instant_seconds`
            counts it, or None when no forcing needs the time.
        calendar: the calendar `seconds` count in.
        latitude: the grid's latitudes in degrees, shaped to broadcast against the grid
            (`io.metadata.grid_coordinates`), or None when no forcing needs the grid.
        longitude: the grid's longitudes, likewise.
        groups: per batch group, its name (None without a spec: keys are the forcings'
            names, shaped `(batch, *grid)`) and the steps its samples carry, relative to
            the anchor in stored steps (keys `group/name`, shaped `(batch, steps, *grid)`).
        grid: the grid's shape (the fields' trailing axes, before patches).
        patch_size: with patches, the crop's size along the grid's last axes, else None.
        by_group: with a spec, the forcings of the groups that take some
            (`forcings={"inputs": [...]}`), or None: every group takes every one of
            `names`.
    """

    names: tuple[str, ...]
    seconds: np.ndarray | None
    calendar: str
    latitude: np.ndarray | None
    longitude: np.ndarray | None
    groups: tuple[tuple[str | None, tuple[int, ...]], ...]
    grid: tuple[int, ...]
    patch_size: tuple[int, ...] | None = None
    by_group: dict[str, tuple[str, ...]] | None = None

    def group_names(self, group: str | None) -> tuple[str, ...]:
        """The forcings `group` takes, in order.

        Args:
            group: a group's name, or None without a spec.
        """
        return self.names if self.by_group is None else group_forcings(self.by_group, group)

    def keys(self, group: str | None) -> list[str]:
        """The batch keys `group`'s forcings fill, in the order of `group_names`.

        Args:
            group: a group's name, or None without a spec.
        """
        names = self.group_names(group)
        return [name if group is None else f"{group}/{name}" for name in names]

    def fingerprint(self) -> list[str] | dict[str, list[str]]:
        """What a state records of the forcings: the names, or the names by group."""
        if self.by_group is None:
            return list(self.names)
        return {group: list(names) for group, names in self.by_group.items()}

    def stacked_steps(self) -> int:
        """Forcing channels of one sample over every group's steps (a stack's copies)."""
        return sum(len(offsets) * len(self.group_names(g)) for g, offsets in self.groups)

    @property
    def output_grid(self) -> tuple[int, ...]:
        """The grid shape of every forcing in a batch (the patch's, with patches)."""
        if self.patch_size is None:
            return self.grid
        kept = self.grid[: len(self.grid) - len(self.patch_size)]
        return (*kept, *self.patch_size)

    def resident_nbytes(self) -> int:
        """Host bytes the loader keeps for its forcings: the valid time of every stored
        step, the grid's coordinates and their terms (`GridTerms`, made once)."""
        kept = 0 if self.seconds is None else int(self.seconds.nbytes)
        # longitude: 12 bytes of terms, at most 48 of `LongitudeColumns` per column
        for coordinate, term_bytes in ((self.latitude, 8), (self.longitude, 60)):
            if coordinate is not None:
                kept += int(coordinate.nbytes) + coordinate.size * term_bytes + 8
        return kept

    def sample_nbytes(self) -> int:
        """Host bytes one sample's forcings hold in a batch computed on the host (each in
        its compact shape, float32: expanded views add nothing), at most."""
        grid = self.output_grid
        latitude = _extent(self.latitude, self.grid, grid)
        longitude = _extent(self.longitude, self.grid, grid)
        per_step = {
            COS_SOLAR_ZENITH_ANGLE: math.prod(grid),
            TOA_INCIDENT_SOLAR_RADIATION: math.prod(grid),
            YEAR_PROGRESS_SIN: 1,
            YEAR_PROGRESS_COS: 1,
            DAY_PROGRESS_SIN: longitude,
            DAY_PROGRESS_COS: longitude,
            COS_LATITUDE: latitude,
            SIN_LONGITUDE: longitude,
            COS_LONGITUDE: longitude,
        }
        return 4 * sum(
            len(offsets) * sum(per_step[name] for name in self.group_names(group))
            for group, offsets in self.groups
        )


def _extent(coordinate: np.ndarray | None, grid: tuple[int, ...], output: tuple[int, ...]) -> int:
    """Values a coordinate (shaped to broadcast against `grid`) has per sample on the
    `output` grid: the output's length along each axis it varies on."""
    if coordinate is None:
        return 0
    return math.prod(o for c, o in zip(coordinate.shape, output, strict=True) if c > 1)
