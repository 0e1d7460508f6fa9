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

import numpy as np
import zarr

ERA5_VARIABLES = ("t2m", "u10", "v10", "msl")
ERA5_GRID = (121, 240)  # 1.5 degree, poles included, as WeatherBench2's coarse copy


def _field(variable: int, times: np.ndarray, grid: tuple[int, int]) -> np.ndarray:
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


def write_era5_like(
    path: str | Path,
    *,
    time_steps: int = 1460,
    steps_per_chunk: int = 8,
    variables: Sequence[str] = ERA5_VARIABLES,
    grid: tuple[int, int] = ERA5_GRID,
) -> Path:
    """Write `(time, lat, lon)` float32 arrays, zstd, Zarr v3; atomically (tmp then rename)."""
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
            array[start:stop] = _field(v, np.arange(start, stop), grid)
    shutil.rmtree(path, ignore_errors=True)
    staging.rename(path)
    return path
