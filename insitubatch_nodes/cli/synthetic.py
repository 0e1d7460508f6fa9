"""Synthetic look-alikes of real archives, written with zarr-python for demos and tests.

Fields are smooth (a latitude gradient, a seasonal and a daily cycle, travelling waves)
plus noise, so zstd compresses them about as well as it compresses real reanalysis data,
and every value is a known function of (variable, time, lat, lon).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

import numcodecs
import numpy as np
import zarr

ERA5_VARIABLES = ("t2m", "u10", "v10", "msl")
ERA5_GRID = (121, 240)  # 1.5 degree, poles included, as WeatherBench2's coarse copy


def weather_field(variable: int, times: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
    """`(times, *grid)` float32: a known smooth function of (variable, time, lat, lon) + noise."""
    lat = np.linspace(np.pi / 2, -np.pi / 2, grid[0], dtype=np.float32)[None, :, None]
    lon = np.linspace(0, 2 * np.pi, grid[1], endpoint=False, dtype=np.float32)[None, None, :]
    t = times.astype(np.float32)[:, None, None]
    season = np.sin(2 * np.pi * t / 1460.0 + variable)
    day = np.sin(2 * np.pi * t / 4.0 + lon)
    waves = np.sin(3 * lon + 0.05 * t * (variable + 1)) * np.cos(2 * lat)
    noise = np.random.default_rng([variable, int(times[0])]).standard_normal(
        (times.size, *grid), dtype=np.float32
    )
    base = 10.0 * (variable + 1) * np.cos(lat)
    return (base + 3 * season + day + 2 * waves + 0.1 * noise).astype(np.float32)


WB2_STATICS = ("land_sea_mask", "geopotential_at_surface")  # as WeatherBench2 names them


def static_field(name: str, grid: tuple[int, int]) -> np.ndarray:
    """`grid` float32 values of a static field WeatherBench2's ERA5 keeps (`WB2_STATICS`):
    a land-sea mask of 0 and 1 (smooth continents), and the surface geopotential
    (m2 s-2), 0 over sea and mountain-like over land.

    Args:
        name: one of `WB2_STATICS`.
        grid: (latitude, longitude) points.
    """
    lat = np.linspace(np.pi / 2, -np.pi / 2, grid[0], dtype=np.float32)[:, None]
    lon = np.linspace(0, 2 * np.pi, grid[1], endpoint=False, dtype=np.float32)[None, :]
    land = (np.sin(2 * lon) * np.cos(3 * lat) + 0.3 * np.sin(5 * lat) > 0.2).astype(np.float32)
    if name == WB2_STATICS[0]:
        return land
    if name == WB2_STATICS[1]:
        heights = 9.80665 * 1500.0 * (1 + np.sin(7 * lon) * np.cos(4 * lat)) * np.cos(lat)
        return (land * np.maximum(heights, 0.0)).astype(np.float32)
    raise ValueError(f"no synthetic static field {name!r}; there are {list(WB2_STATICS)}")


def write_era5_like(
    path: str | Path,
    *,
    time_steps: int = 1460,
    steps_per_chunk: int = 8,
    variables: Sequence[str] = ERA5_VARIABLES,
    grid: tuple[int, int] = ERA5_GRID,
    statics: Sequence[str] = (),
) -> Path:
    """Write `(time, lat, lon)` float32 arrays, zstd, Zarr v3; atomically (tmp then rename);
    and `statics` (`WB2_STATICS`' names), `(lat, lon)`, one chunk each."""
    path = Path(path)
    staging = path.with_name(path.name + f".partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    group = zarr.open_group(str(staging), mode="w")
    group.create_array("latitude", data=np.linspace(90, -90, grid[0], dtype=np.float32))
    group.create_array(
        "longitude", data=np.linspace(0, 360, grid[1], endpoint=False, dtype=np.float32)
    )
    for v, name in enumerate(variables):
        array = group.create_array(
            name,
            shape=(time_steps, *grid),
            chunks=(steps_per_chunk, *grid),
            dtype="float32",
            compressors=zarr.codecs.ZstdCodec(level=1),
            dimension_names=("time", "latitude", "longitude"),
        )
        for start in range(0, time_steps, steps_per_chunk * 16):
            stop = min(start + steps_per_chunk * 16, time_steps)
            array[start:stop] = weather_field(v, np.arange(start, stop), grid)
    for name in statics:
        group.create_array(
            name,
            data=static_field(name, grid),
            compressors=zarr.codecs.ZstdCodec(level=1),
            fill_value=np.nan,
            dimension_names=("latitude", "longitude"),
        )
    shutil.rmtree(path, ignore_errors=True)
    staging.rename(path)
    return path


def _staged_group(path: Path, zarr_format: int) -> tuple[Path, zarr.Group]:
    staging = path.with_name(path.name + f".partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    return staging, zarr.open_group(str(staging), mode="w", zarr_format=zarr_format)


def _publish(staging: Path, path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    staging.rename(path)
    return path


def _blosc_lz4() -> numcodecs.Blosc:
    """zarr 2's default compressor, which the ERA5 and HRRR build scripts leave in place."""
    return numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE)


WB2_SURFACE = (
    "2m_temperature",
    "10m_u_component_of_wind",
    "10m_v_component_of_wind",
    "mean_sea_level_pressure",
)
WB2_LEVEL_VARIABLES = ("geopotential",)
WB2_LEVELS = (50, 100, 150, 200, 250, 300, 400, 500, 600, 700, 850, 925, 1000)


WB2_YEARS = ("1979-01-01", "2019-01-01")  # ClimaX's years: train 1979-2015 .. test 2018


def coarse_hours(time_steps: int, years: tuple[str, str] = WB2_YEARS) -> int:
    """The step, in whole multiples of 6 hours, at which `time_steps` steps span `years`
    ([first, end)): 6 when there are steps enough for 6-hourly data, coarser otherwise.

    Args:
        time_steps: the store's length.
        years: the first date and the date after the last.
    """
    span = (np.datetime64(years[1]) - np.datetime64(years[0])) // np.timedelta64(6, "h")
    return 6 * max(1, int(span) // max(time_steps - 1, 1))


def write_weatherbench2_like(
    path: str | Path,
    *,
    time_steps: int = 160,
    grid: tuple[int, int] = ERA5_GRID,
    surface: Sequence[str] = WB2_SURFACE,
    level_variables: Sequence[str] = WB2_LEVEL_VARIABLES,
    levels: Sequence[int] = WB2_LEVELS,
    statics: Sequence[str] = WB2_STATICS,
) -> Path:
    """WeatherBench2's 1.5 degree ERA5 copy, scaled down in time: Zarr format 2, float32,
    one step per chunk ((1, lat, lon) and (1, level, lat, lon)), Blosc lz4, coordinates
    as xarray writes them, and its time-less `statics` ((lat, lon), one chunk each). Its
    time coordinate ("hours since 1979-01-01", Gregorian) spans 1979-2018 at a coarse
    step (`coarse_hours`), so that date splits are written as on the real archive
    ("1979:2015", "2016", "2017:2018")."""
    path = Path(path)
    staging, group = _staged_group(path, zarr_format=2)
    hours = np.arange(time_steps, dtype=np.int64) * coarse_hours(time_steps)
    coordinates = {
        "latitude": np.linspace(90, -90, grid[0], dtype=np.float32),
        "longitude": np.linspace(0, 360, grid[1], endpoint=False, dtype=np.float32),
        "level": np.array(levels, dtype=np.int64),
        "time": hours,
    }
    for name, values in coordinates.items():
        # as xarray writes them: NaN fills floats, integers have none; zarr's default 0
        # would be a fill value xarray masks (longitude 0 and the first hour shown as NaN)
        fill = np.nan if values.dtype.kind == "f" else None
        array = group.create_array(name, data=values, fill_value=fill)
        array.attrs["_ARRAY_DIMENSIONS"] = [name]
    group["time"].attrs.update(
        {"units": f"hours since {WB2_YEARS[0]}", "calendar": "proleptic_gregorian"}
    )
    times = np.arange(time_steps)
    for v, name in enumerate(surface):
        array = group.create_array(
            name,
            shape=(time_steps, *grid),
            chunks=(1, *grid),
            dtype="float32",
            compressors=_blosc_lz4(),
            fill_value=np.nan,
        )
        array.attrs["_ARRAY_DIMENSIONS"] = ["time", "latitude", "longitude"]
        array[...] = weather_field(v, times, grid)
    for v, name in enumerate(level_variables, start=len(surface)):
        array = group.create_array(
            name,
            shape=(time_steps, len(levels), *grid),
            chunks=(1, len(levels), *grid),
            dtype="float32",
            compressors=_blosc_lz4(),
            fill_value=np.nan,
        )
        array.attrs["_ARRAY_DIMENSIONS"] = ["time", "level", "latitude", "longitude"]
        for start in range(0, time_steps, 16):  # whole chunks: no read-modify-write
            block = times[start : start + 16]
            array[block[0] : block[-1] + 1] = np.stack(
                [weather_field(v + 10 * i, block, grid) for i in range(len(levels))], axis=1
            )
    for name in statics:
        array = group.create_array(  # NaN fill, as xarray writes floats: a 0 is sea, not missing
            name, data=static_field(name, grid), compressors=_blosc_lz4(), fill_value=np.nan
        )
        array.attrs["_ARRAY_DIMENSIONS"] = ["latitude", "longitude"]
    return _publish(staging, path)


HRRR_GRID = (1059, 1799)
HRRR_VARIABLES = ("TMP_2m_above_ground", "UGRD_10m_above_ground", "VGRD_10m_above_ground")


def write_hrrr_like(
    path: str | Path,
    *,
    time_steps: int = 24,
    grid: tuple[int, int] = HRRR_GRID,
    chunk: int = 150,
    variables: Sequence[str] = HRRR_VARIABLES,
) -> Path:
    """HRRR-Zarr analyses consolidated along time: Zarr format 2, float16, (1, 150, 150)
    chunks (8 x 12 of them per step on the 1059 x 1799 grid), Blosc lz4."""
    path = Path(path)
    staging, group = _staged_group(path, zarr_format=2)
    times = np.arange(time_steps)
    for v, name in enumerate(variables):
        array = group.create_array(
            name,
            shape=(time_steps, *grid),
            chunks=(1, chunk, chunk),
            dtype="float16",
            compressors=_blosc_lz4(),
        )
        array.attrs["_ARRAY_DIMENSIONS"] = ["time", "y", "x"]
        for t in times.tolist():
            array[t] = weather_field(v, times[t : t + 1], grid)[0].astype(np.float16)
    return _publish(staging, path)
