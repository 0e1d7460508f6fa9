"""Stores on a global latitude/longitude grid, as `xr.Dataset.to_zarr` writes them, and
the region of one that xarray selects for an area (`ds.sel`, `roll`, `concat`): the
reference `area=` is held to."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

LEVELS = [1000, 850, 500, 250]
STEP = 10.0  # degrees between grid points
CHUNKS = {"time": 4, "level": 2, "latitude": 5, "longitude": 8}


def grid_dataset(*, descending: bool, signed: bool, steps: int = 12, seed: int = 0) -> xr.Dataset:
    """Two variables on a 10-degree global grid, and a static field (`land_sea_mask`, no
    time): latitudes stored descending (90 ... -90, as ERA5) or ascending, longitudes in
    [-180, 180) (`signed`) or [0, 360); a few values NaN (masked), so that comparisons
    see NaN where xarray does."""
    rng = np.random.default_rng(seed)
    lat = np.arange(-90.0, 90.0 + STEP / 2, STEP)
    lat = lat[::-1] if descending else lat
    lon = np.arange(-180.0, 180.0, STEP) if signed else np.arange(0.0, 360.0, STEP)
    shape = (steps, lat.size, lon.size)
    t2m = rng.normal(280, 10, shape).astype(np.float32)
    z = rng.normal(5e4, 1e3, (steps, len(LEVELS), lat.size, lon.size)).astype(np.float32)
    t2m[rng.random(shape) < 0.02] = np.nan
    times = np.datetime64("2020-01-01T00", "ns") + np.arange(steps) * np.timedelta64(6, "h")
    ds = xr.Dataset(
        {
            "t2m": (("time", "latitude", "longitude"), t2m),
            "z": (("time", "level", "latitude", "longitude"), z),
        },
        coords={"time": times, "level": LEVELS, "latitude": lat, "longitude": lon},
    )
    ds["land_sea_mask"] = (("latitude", "longitude"), rng.random((lat.size, lon.size), "f4"))
    ds.latitude.attrs.update(units="degrees_north", standard_name="latitude")
    ds.longitude.attrs.update(units="degrees_east", standard_name="longitude")
    return ds


def write_grid_store(path: Path, *, zarr_format: int, descending: bool, signed: bool) -> str:
    """`grid_dataset` written with `to_zarr` in chunks of `CHUNKS`."""
    ds = grid_dataset(descending=descending, signed=signed)
    encoding = {
        "t2m": {"chunks": (CHUNKS["time"], CHUNKS["latitude"], CHUNKS["longitude"])},
        "z": {"chunks": tuple(CHUNKS.values())},
        "land_sea_mask": {"chunks": (CHUNKS["latitude"], CHUNKS["longitude"])},
    }
    ds.to_zarr(str(path), mode="w", zarr_format=zarr_format, encoding=encoding, consolidated=False)
    return str(path)


def xarray_area(ds: xr.Dataset, north: float, west: float, south: float, east: float) -> xr.Dataset:
    """The box as xarray users cut it: `sel` of a latitude slice in the stored order, and
    longitudes from `west` eastward, across the stored seam by `concat` of the axis's end
    and start, or the whole circle by `roll` to start at `west`."""
    lat = ds.latitude.values
    rows = (
        slice(north + 1e-6, south - 1e-6) if lat[0] > lat[-1] else slice(south - 1e-6, north + 1e-6)
    )
    ds = ds.sel(latitude=rows)
    lon = ds.longitude.values
    low = -180.0 if lon.min() < 0 else 0.0
    w = (west - low) % 360 + low  # the edges in the stored convention
    e = (east - low) % 360 + low
    if east - west >= 360:
        first = int(np.argmax(lon >= w - 1e-6)) if (lon >= w - 1e-6).any() else 0
        return ds.roll(longitude=-first, roll_coords=True)
    if w <= e:
        return ds.sel(longitude=slice(w - 1e-6, e + 1e-6))
    return xr.concat(
        [ds.sel(longitude=slice(w - 1e-6, None)), ds.sel(longitude=slice(None, e + 1e-6))],
        dim="longitude",
    )
