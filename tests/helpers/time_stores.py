"""Stores with a time coordinate, as weather archives have one: written by xarray
(`to_zarr`, Zarr v2 and v3, CF-encoded time: int64 "hours since ...") and by zarr-python
(datetime64 stored natively), with pressure levels as a coordinate too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zarr

LEVELS = (50, 100, 250, 500, 700, 850, 1000)


def hourly(start: str, steps: int, hours: int = 1) -> np.ndarray:
    """`steps` dates from `start`, `hours` apart, as datetime64[ns] (what xarray holds)."""
    return np.datetime64(start, "ns") + np.arange(steps) * np.timedelta64(hours, "h")


def fields(times: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    """A surface field (time, lat, lon) and a level field (time, level, lat, lon) whose
    values say which step (and level) they are: value = step * 1000 + level index."""
    n = times.size
    step = np.arange(n, dtype=np.float32)[:, None, None]
    t2m = np.broadcast_to(step * 1000, (n, 3, 4)).astype(np.float32)
    level = np.arange(len(LEVELS), dtype=np.float32)[None, :, None, None]
    z = np.broadcast_to(step[:, None] * 1000 + level, (n, len(LEVELS), 3, 4)).astype(np.float32)
    noise = np.random.default_rng(seed).random((n, 3, 4), dtype=np.float32) * 1e-3
    return {"t2m": t2m + noise, "z": z.copy()}


def write_xarray(
    path: Path,
    times: np.ndarray,
    *,
    zarr_format: int,
    steps_per_chunk: int = 4,
    descending: bool = False,
) -> str:
    """The store `xr.Dataset(...).to_zarr` writes: CF-encoded time, `_ARRAY_DIMENSIONS`
    (v2) or `dimension_names` (v3), a `level` coordinate; with `descending`, the levels
    stored 1000 ... 50 as CDS ERA5 downloads keep them (each value still that of its level:
    `fields`)."""
    import xarray as xr

    values = fields(times)
    ds = xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), values["t2m"]),
            "z": (("time", "level", "lat", "lon"), values["z"]),
        },
        coords={
            "time": times,
            "level": np.array(LEVELS, dtype=np.int64),
            "lat": np.arange(3.0),
            "lon": np.arange(4.0),
        },
    )
    if descending:
        ds = ds.isel(level=slice(None, None, -1))
    encoding = {
        "t2m": {"chunks": (steps_per_chunk, 3, 4)},
        "z": {"chunks": (steps_per_chunk, 2, 3, 4)},
    }
    ds.to_zarr(str(path), mode="w", zarr_format=zarr_format, encoding=encoding, consolidated=False)
    return str(path)


def write_native(
    path: Path, times: np.ndarray, *, zarr_format: int = 3, steps_per_chunk: int = 4
) -> str:
    """zarr-python only: datetime64 stored natively as the time coordinate."""
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    values = fields(times)
    dims = {"t2m": ("time", "lat", "lon"), "z": ("time", "level", "lat", "lon")}
    for name, data in values.items():
        chunks = (steps_per_chunk, *data.shape[1:])
        if zarr_format == 3:
            array = group.create_array(
                name, shape=data.shape, chunks=chunks, dtype="f4", dimension_names=dims[name]
            )
        else:
            array = group.create_array(name, shape=data.shape, chunks=chunks, dtype="f4")
            array.attrs["_ARRAY_DIMENSIONS"] = list(dims[name])
        array[...] = data
    extra = {"time": times.astype("M8[s]"), "level": np.array(LEVELS, dtype=np.int64)}
    for name, data in extra.items():
        if zarr_format == 3:
            array = group.create_array(name, data=data, dimension_names=(name,))
        else:
            array = group.create_array(name, data=data)
            array.attrs["_ARRAY_DIMENSIONS"] = [name]
    return str(path)


def calendar_times(calendar: str, start: str, steps: int, hours: int = 12) -> np.ndarray:
    """`steps` cftime dates of `calendar` from `start`, `hours` apart (what
    `xr.open_zarr(..., use_cftime=True)` holds for a climate model's time axis)."""
    import xarray as xr

    dates = xr.date_range(
        start, periods=steps, freq=f"{hours}h", calendar=calendar, use_cftime=True
    )
    return np.asarray(dates)


def write_calendar(
    path: Path, times: np.ndarray, *, zarr_format: int, steps_per_chunk: int = 8
) -> str:
    """The store `to_zarr` writes for cftime dates: time as numbers "... since ..." with the
    calendar's `calendar` attribute; `t2m` (time, lat, lon) holds each step's index."""
    import xarray as xr

    n = times.size
    step = np.arange(n, dtype=np.float32)[:, None, None]
    ds = xr.Dataset(
        {"t2m": (("time", "lat", "lon"), np.broadcast_to(step, (n, 2, 3)).copy())},
        coords={"time": times, "lat": np.arange(2.0), "lon": np.arange(3.0)},
    )
    encoding = {"t2m": {"chunks": (steps_per_chunk, 2, 3)}}
    ds.to_zarr(str(path), mode="w", zarr_format=zarr_format, encoding=encoding, consolidated=False)
    return str(path)
