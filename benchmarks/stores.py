"""The synthetic ERA5-shaped stores the benchmark reads, one per (time steps, chunking, codec).

The zstd store is the library's own synthetic writer; other codecs are the same values and
chunk shapes re-encoded with zarr, so every codec scenario holds identical data.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.codecs

from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES, weather_field, write_era5_like

# The codec the synthetic writer uses, then the ones re-encoded from it.
BASE_CODEC = "zstd"
RECODED: dict[str, Any] = {
    "blosc-lz4": zarr.codecs.BloscCodec(cname="lz4", clevel=5, shuffle="shuffle"),
}
CODECS = (BASE_CODEC, *RECODED)
CODEC_LABELS = {"zstd": "zstd level 1", "blosc-lz4": "blosc lz4 level 5, byte shuffle"}


def ensure_store(cache: Path, time_steps: int, steps_per_chunk: int, codec: str) -> Path:
    """The store's path, written once (atomically) and reused by later runs."""
    if codec not in CODECS:
        raise ValueError(f"unknown codec {codec!r}; choose from {', '.join(CODECS)}")
    path = cache / f"era5-{time_steps}-c{steps_per_chunk}-{codec}.zarr"
    if (path / "zarr.json").exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    if codec == BASE_CODEC:
        write_era5_like(path, time_steps=time_steps, steps_per_chunk=steps_per_chunk)
        _label_coordinates(path)
        return path
    source = ensure_store(cache, time_steps, steps_per_chunk, BASE_CODEC)
    _recode(source, path, RECODED[codec])
    return path


def warm_page_cache(path: Path) -> None:
    """Read every stored file once, so that each reader starts from a warm page cache (this
    VM drops file pages left idle for a few seconds).

    Args:
        path: the store's directory.
    """
    for file in path.rglob("*"):
        if file.is_file():
            file.read_bytes()


def _label_coordinates(path: Path) -> None:
    """Give the coordinate arrays dimension names, and add a `time` coordinate, as real ERA5
    copies have: `xarray.open_zarr` refuses a Zarr v3 array without `dimension_names`."""
    group = zarr.open_group(str(path), mode="r+")
    length = group[ERA5_VARIABLES[0]].shape[0]
    coordinates = {name: group[name][...] for name in ("latitude", "longitude")}
    coordinates["time"] = np.arange(length, dtype=np.int64)  # the sample index, for checks
    for name, values in coordinates.items():
        group.create_array(name, data=values, dimension_names=(name,), overwrite=True)


def _recode(source: Path, target: Path, compressor: Any) -> None:
    staging = target.with_name(target.name + f".partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    old = zarr.open_group(str(source), mode="r")
    new = zarr.open_group(str(staging), mode="w")
    for name, array in old.arrays():
        copy = new.create_array(
            name,
            shape=array.shape,
            chunks=array.chunks,
            dtype=array.dtype,
            compressors=compressor if name in ERA5_VARIABLES else "auto",
            dimension_names=array.metadata.dimension_names,  # type: ignore[union-attr]
        )
        step = max(array.chunks[0], 64) if name in ERA5_VARIABLES else array.shape[0]
        step -= step % array.chunks[0]
        for start in range(0, array.shape[0], step):
            copy[start : start + step] = array[start : start + step]
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


ARCO_LEVELS = 37
ARCO_GRID = (721, 1440)
ARCO_VARIABLES = ("temperature", "2m_temperature")


def ensure_arco_store(cache: Path, time_steps: int) -> Path:
    """A store with ARCO-ERA5's layout and few time steps: a `(T, 37, 721, 1440)` float32
    variable chunked one step (154 MB per chunk, decoded) beside a `(T, 721, 1440)` surface
    variable, zstd level 1, smooth fields with noise. Written once (atomically), reused.

    Args:
        cache: the folder the benchmark stores live in.
        time_steps: T, the steps (one chunk each).
    """
    path = cache / f"arco-{time_steps}.zarr"
    if (path / "zarr.json").exists():
        return path
    cache.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(path.name + f".partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    group = zarr.open_group(str(staging), mode="w")
    zstd = zarr.codecs.ZstdCodec(level=1)
    levels = group.create_array(
        ARCO_VARIABLES[0],
        shape=(time_steps, ARCO_LEVELS, *ARCO_GRID),
        chunks=(1, ARCO_LEVELS, *ARCO_GRID),
        dtype="float32",
        compressors=zstd,
        dimension_names=("time", "level", "latitude", "longitude"),
    )
    surface = group.create_array(
        ARCO_VARIABLES[1],
        shape=(time_steps, *ARCO_GRID),
        chunks=(1, *ARCO_GRID),
        dtype="float32",
        compressors=zstd,
        dimension_names=("time", "latitude", "longitude"),
    )
    for step in range(time_steps):
        steps = np.array([step])
        levels[step] = np.stack(
            [weather_field(level, steps, ARCO_GRID)[0] for level in range(ARCO_LEVELS)]
        )
        surface[step] = weather_field(ARCO_LEVELS, steps, ARCO_GRID)[0]
    shutil.rmtree(path, ignore_errors=True)
    staging.rename(path)
    return path
