"""Real zarr stores written by zarr-python, with distinct values the tests compare against."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.abc.store

from insitubatch_nodes import memory_store

_names = itertools.count()

# name -> (shape, chunks, dtype); axis 0 is the sample axis.
DEFAULT_VARIABLES: Mapping[str, tuple[tuple[int, ...], tuple[int, ...], str]] = {
    "t2m": ((88, 3, 4), (3, 3, 2), "float32"),
    "u10": ((88, 2), (2, 2), "int16"),
}


def write_store(
    where: str | Path | zarr.abc.store.Store,
    variables: Mapping[str, tuple[tuple[int, ...], tuple[int, ...], str]] = DEFAULT_VARIABLES,
    *,
    zarr_format: int = 3,
    compressor: str = "zstd",
    seed: int = 0,
    extra_arrays: Mapping[str, np.ndarray] | None = None,
) -> tuple[str, dict[str, np.ndarray]]:
    """Write arrays with distinct values; return the URL to open and the arrays written
    (for a `Store`, its `repr`: the caller knows its URL)."""
    if isinstance(where, zarr.abc.store.Store):
        store, url = where, repr(where)
    elif where == "memory":
        name = f"test-{next(_names)}"
        store: Any = memory_store(name)
        url = f"memory://{name}"
    else:
        store = zarr.storage.LocalStore(str(where))
        url = f"file://{where}"
    rng = np.random.default_rng(seed)
    group = zarr.open_group(store, mode="w", zarr_format=zarr_format)  # type: ignore[arg-type]
    truth = {}
    for name, (shape, chunks, dtype) in variables.items():
        codec: Any
        if compressor == "zstd":
            codec = zarr.codecs.ZstdCodec() if zarr_format == 3 else _numcodecs_zstd()
        else:
            codec = None
        array = group.create_array(
            name,
            shape=shape,
            chunks=chunks,
            dtype=dtype,
            compressors=codec,
            fill_value=0,
        )
        values = rng.integers(-1000, 1000, size=shape).astype(dtype)
        array[...] = values
        truth[name] = values
    for name, values in (extra_arrays or {}).items():
        group.create_array(name, shape=values.shape, dtype=values.dtype)[...] = values
    return url, truth


def _numcodecs_zstd() -> Any:
    import numcodecs

    return numcodecs.Zstd()
