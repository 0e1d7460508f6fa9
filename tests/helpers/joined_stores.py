"""Stores to join, as the CDS hands ERA5 out: a pressure-level store, a surface store and
a store of static fields on one grid, written by xarray's `to_zarr`, and what
`xr.merge` makes of them (the reference a join's batches are held to)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from tests.helpers.s3_server import S3Server

LATITUDE = np.linspace(60.0, -60.0, 5)
LONGITUDE = np.arange(8) * 45.0
LEVELS = [1000, 850, 500]


def dates(first: int, steps: int, drop: tuple[int, ...] = ()) -> np.ndarray:
    """6-hourly dates from 2020-01-01 plus `first` steps, `steps` of them, less the
    positions in `drop`."""
    found = pd.date_range("2020-01-01", periods=first + steps, freq="6h").values[first:]
    return np.delete(found, list(drop))


def pressure_levels(times: np.ndarray, seed: int = 1) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    shape = (times.size, len(LEVELS), LATITUDE.size, LONGITUDE.size)
    return xr.Dataset(
        {
            "t": (("time", "level", "latitude", "longitude"), rng.standard_normal(shape, "f4")),
            "z": (("time", "level", "latitude", "longitude"), rng.standard_normal(shape, "f4")),
        },
        coords={"time": times, "level": LEVELS, "latitude": LATITUDE, "longitude": LONGITUDE},
    )


def surface(times: np.ndarray, seed: int = 2, latitude: np.ndarray = LATITUDE) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    shape = (times.size, latitude.size, LONGITUDE.size)
    return xr.Dataset(
        {
            "t2m": (("time", "latitude", "longitude"), rng.standard_normal(shape, "f4")),
            "msl": (("time", "latitude", "longitude"), rng.standard_normal(shape, "f4")),
        },
        coords={"time": times, "latitude": latitude, "longitude": LONGITUDE},
    )


def cds_named(ds: xr.Dataset) -> xr.Dataset:
    """`ds` with time named as the CDS names it in ERA5 downloads (`valid_time`), where
    WeatherBench2's stores say `time`."""
    return ds.rename(time="valid_time")


def statics(seed: int = 3) -> xr.Dataset:
    rng = np.random.default_rng(seed)
    shape = (LATITUDE.size, LONGITUDE.size)
    return xr.Dataset(
        {"lsm": (("latitude", "longitude"), rng.random(shape, "f4"))},
        coords={"latitude": LATITUDE, "longitude": LONGITUDE},
    )


def write(ds: xr.Dataset, path: Path, chunk: int | None, zarr_format: int) -> str:
    """`ds` written by `to_zarr`, its time-varying variables chunked `chunk` steps."""
    encoding: dict[str, Any] = {}
    if chunk is not None:
        for name, array in ds.data_vars.items():
            encoding[name] = {"chunks": (chunk, *array.shape[1:])}
    ds.to_zarr(path, mode="w", encoding=encoding, zarr_format=zarr_format, consolidated=True)
    return str(path)


def era5_join(
    folder: Path,
    *,
    zarr_format: int = 3,
    pressure: tuple[int, int] = (0, 60),
    surface_steps: tuple[int, int] = (0, 60),
    pressure_chunk: int = 24,
    surface_chunk: int = 1,
    surface_drop: tuple[int, ...] = (),
    pressure_drop: tuple[int, ...] = (),
) -> list[str]:
    """URLs of a pressure-level store (`t`, `z` on levels), a surface store (`t2m`,
    `msl`) and a static store (`lsm`): each time-varying one from its (first step,
    steps), less the positions of its `*_drop`, and chunked as given."""
    return [
        write(
            pressure_levels(dates(*pressure, drop=pressure_drop)),
            folder / "pl.zarr",
            pressure_chunk,
            zarr_format,
        ),
        write(
            surface(dates(*surface_steps, drop=surface_drop)),
            folder / "sfc.zarr",
            surface_chunk,
            zarr_format,
        ),
        write(statics(), folder / "static.zarr", None, zarr_format),
    ]


def merged(urls: list[str], join: str) -> xr.Dataset:
    """What xarray makes of the stores: the reference of a join's batches."""
    return xr.merge([xr.open_zarr(url) for url in urls], join=join)


def s3_and_local_join(folder: Path, s3_server: S3Server) -> list[str]:
    """URLs of a pressure-level store on the loopback S3 server (read with its
    credentials) and a surface store on local disk (read with none), 30 steps each."""
    bucket_url = f"s3://{s3_server.new_bucket()}/pl.zarr"
    local = era5_join(folder, pressure=(0, 30), surface_steps=(0, 30))
    pressure_levels(dates(0, 30)).to_zarr(
        s3_server.writable_store(bucket_url),
        mode="w",
        encoding={"t": {"chunks": (24, 3, 5, 8)}, "z": {"chunks": (24, 3, 5, 8)}},
        zarr_format=3,
        consolidated=True,
    )
    return [bucket_url, local[1]]
