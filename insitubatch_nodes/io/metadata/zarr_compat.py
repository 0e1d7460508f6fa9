"""Everything that differs between zarr 3.1 and 3.4, in one place.

Only this module touches zarr internals that moved between releases; each helper says
which difference it hides. Tested on the zarr the CI installs (3.1 on Python 3.11) and by
hand on 3.4 (Python 3.12).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import google_crc32c
import numpy as np
import zarr

T = TypeVar("T")


def native_dtype(metadata: Any) -> np.dtype[Any]:
    """The numpy dtype of stored elements: `metadata.dtype` is a zarr ZDType from 3.1 on."""
    dtype = metadata.dtype
    to_native = getattr(dtype, "to_native_dtype", None)
    return np.dtype(to_native() if to_native is not None else dtype)


def chunk_key(metadata: Any, prefix: str, coords: tuple[int, ...]) -> str:
    """Store key of chunk `coords` of the array stored under `prefix`."""
    key = metadata.encode_chunk_key(coords)
    return f"{prefix}/{key}" if prefix else key


def stored_object_key(metadata: Any, prefix: str, selection: tuple[slice, ...]) -> str:
    """Key of the stored object (the chunk, or the shard of a sharded array) holding the
    first element of `selection`."""
    outer = metadata.chunks if metadata.zarr_format == 2 else metadata.chunk_grid.chunk_shape
    coords = tuple(s.start // size for s, size in zip(selection, outer, strict=True))
    return chunk_key(metadata, prefix, coords)


def crc32c(data: bytes | memoryview) -> int:
    """The crc32c of `data`, computed by the library zarr's own `crc32c` codec uses, so a
    checksum zarr wrote is checked the way zarr checks it (it takes numpy arrays, not
    memoryviews: a view, no copy)."""
    return int(google_crc32c.value(np.frombuffer(data, dtype=np.uint8)))


def fill_scalar(metadata: Any, dtype: np.dtype[Any]) -> Any:
    """The value a missing chunk reads as (zarr 2 arrays may record none: zeros)."""
    fill = metadata.fill_value
    return np.zeros((), dtype=dtype)[()] if fill is None else fill


@contextmanager
def codec_pipeline(path: str | None) -> Iterator[None]:
    """Arrays opened inside use the codec pipeline class at `path` (zarr picks an array's
    pipeline from its global config when the array is opened); `None` leaves zarr's."""
    if path is None:
        yield
        return
    with zarr.config.set({"codec_pipeline.path": path}):
        yield


def resolve_pipeline(name: str | None) -> str | None:
    """`"zarrs"` (the Rust codec pipeline, extra `zarrs`) or a dotted class path, checked now
    rather than at the first read."""
    if name is None:
        return None
    path = "zarrs.ZarrsCodecPipeline" if name == "zarrs" else name
    module = path.rpartition(".")[0]
    if not module or importlib.util.find_spec(module.split(".")[0]) is None:
        hint = "pip install 'insitubatch-nodes[zarrs]'" if name == "zarrs" else "install it"
        raise ValueError(
            f"zarr_pipeline={name!r}: cannot import {module or name!r}; {hint}, or pass None "
            f"to keep zarr's own pipeline"
        )
    return path


def pipeline_can_read(path: str, metadata: Any) -> bool:
    """Whether the pipeline at `path` reads arrays like this one correctly: zarrs 0.2.3
    fails on Zarr v2 arrays in F order ("input array must be a C contiguous array")."""
    if path.startswith("zarrs.") and metadata.zarr_format == 2:
        return str(metadata.order) == "C"
    return True


def run_on_zarr_loop(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run `coroutine` on zarr's own IO loop, as zarr's synchronous API does (its module
    path is internal, so it is imported here only)."""
    from zarr.core.sync import sync

    return sync(coroutine)
