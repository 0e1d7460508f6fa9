"""Real zarr stores written by zarr-python, and helpers shared by the tests."""

from __future__ import annotations

import gc
import io
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import zarr
import zarr.abc.store

from insitubatch_nodes import forget_memory_store, memory_store

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


@pytest.fixture
def memory_url() -> Iterator[Callable[..., tuple[str, dict[str, np.ndarray]]]]:
    """A factory writing in-memory stores, forgotten after the test."""
    made: list[str] = []

    def make(*args: Any, **kwargs: Any) -> tuple[str, dict[str, np.ndarray]]:
        url, truth = write_store("memory", *args, **kwargs)
        made.append(url.removeprefix("memory://"))
        return url, truth

    yield make
    for name in made:
        forget_memory_store(name)


def our_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("insitubatch")]


def threads_left_by_earlier_tests() -> set[threading.Thread]:
    """Our threads still running before a test starts, after a garbage collection: a loader
    another test dropped stops its threads when it is collected, which a reference cycle
    can put off until the collector runs, so a test counting the threads it leaves sets
    these aside rather than blaming itself for them."""
    gc.collect()
    deadline = time.monotonic() + 2.0
    while our_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return set(our_threads())


def torch_roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint does to a state: torch.save then torch.load."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def batch_key(batch: Mapping[str, Any]) -> tuple[Any, ...]:
    """A comparable fingerprint of a batch: its sample indices and every value."""
    return tuple(
        (name, tuple(host.shape), host.tobytes())
        for name, host in ((n, as_numpy(v)) for n, v in sorted(batch.items()))
    )


def as_numpy(value: Any) -> np.ndarray:
    """Host copy of an array or a tensor on any device."""
    return value.cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[Any]:
    """A real S3 API (moto's server) on loopback, for the whole session; see s3_server.py."""
    from s3_server import S3Server

    server = S3Server.start()
    try:
        yield server
    finally:
        server.stop()
