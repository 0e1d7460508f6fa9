"""`insitubatch inspect`'s view of one array: its layout, its codecs with their settings,
and what one chunk costs to read and decode.

What `inspect_store` (`cli.store_report`) lists for each selected array, from its
metadata and the sampled stored sizes of a few chunks: what a read brings (steps per
chunk, per shard), the codec chain as a user would write it, and whether zarr rather
than the library decodes its chunks, and why.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from insitubatch_nodes.io.metadata.dimensions import dimension_names
from insitubatch_nodes.io.reads.codecs import ZarrDecodes, codec_text
from insitubatch_nodes.io.reads.stored_array import stored_array
from insitubatch_nodes.io.reads.stored_sizes import StoredSizes


@dataclass(frozen=True)
class ArrayReport:
    """One selected array as the loader sees it.

    Args:
        name: the array's name in the group.
        dims: its dimension names (Zarr v3 `dimension_names`, or xarray's
            `_ARRAY_DIMENSIONS` attribute), or None when the store names none.
        shape: its shape.
        dtype: its element type, as numpy spells it (stored byte order).
        chunks: its chunk shape (the inner chunk when sharded): what one decode yields.
        shards: its shard shape (one stored object), or None when not sharded.
        codecs: the codec chain in short, with the compressor's settings.
        read_through_zarr: why zarr, not the library's own decoder, decodes its chunks
            (zarr's path costs more Python per chunk), or None when the library does.
        chunk_count: chunks (inner chunks when sharded) in the array.
        decoded_chunk_bytes: bytes of one decoded chunk.
        stored_chunk: stored bytes per chunk, sampled.
        stored_shard: stored bytes per shard, sampled, or None when not sharded.
        steps_per_chunk: samples (time steps) in one chunk: what one read brings.
        steps_per_shard: samples in one shard, or None when not sharded.
    """

    name: str
    dims: tuple[str, ...] | None
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    codecs: str
    read_through_zarr: str | None
    chunk_count: int
    decoded_chunk_bytes: int
    stored_chunk: StoredSizes
    stored_shard: StoredSizes | None
    steps_per_chunk: int
    steps_per_shard: int | None


def _v3_chain(codecs: Iterable[Mapping[str, Any]]) -> str:
    parts = []
    for codec in codecs:
        config = codec.get("configuration") or {}
        if config.get("codecs"):
            parts.append(f"{codec['name']}({_v3_chain(config['codecs'])})")
        else:
            parts.append(codec_text(str(codec["name"]), config))
    return "+".join(parts)


def codecs_in_short(array: zarr.Array) -> str:
    """The codec chain with the compressor's settings, e.g. "bytes+zstd(level=1)",
    "sharding_indexed(bytes+blosc(cname=lz4,clevel=5,shuffle=shuffle))", or Zarr v2's
    filters then compressor.
    Unlike `array_metadata.codec_summary` (names only, for the fingerprint), the settings
    show here (which ones, per compressor: the codec table's `codec_text`): they decide
    how well the data compresses and how fast it decodes.

    Args:
        array: an opened zarr array.
    """
    metadata = array.metadata.to_dict()
    if "codecs" in metadata:
        return _v3_chain(metadata["codecs"] or ()) or "none"
    chain = [*(metadata.get("filters") or ()), metadata.get("compressor")]
    return "+".join(codec_text(str(c["id"]), c) for c in chain if c is not None) or "none"


def _zarr_reason(name: str, array: zarr.Array) -> str | None:
    """Why the loader reads `array` through zarr, by the rule its readers follow."""
    stored = stored_array(name, array.async_array)
    return stored.reason if isinstance(stored, ZarrDecodes) else None


def array_report(
    name: str, array: zarr.Array, stored_chunk: StoredSizes, stored_shard: StoredSizes | None
) -> ArrayReport:
    """What `inspect` says of one selected array.

    Args:
        name: the array's name in its group.
        array: the opened array.
        stored_chunk: its stored bytes per chunk, sampled (`measure_stored_sizes`).
        stored_shard: its stored bytes per shard, sampled, or None when not sharded.
    """
    dtype = np.dtype(array.dtype)
    chunks = tuple(int(c) for c in array.chunks)
    shards = None if array.shards is None else tuple(int(s) for s in array.shards)
    return ArrayReport(
        name=name,
        dims=dimension_names(array),
        shape=tuple(int(s) for s in array.shape),
        dtype=dtype.str if dtype.byteorder == ">" else dtype.name,
        chunks=chunks,
        shards=shards,
        codecs=codecs_in_short(array),
        read_through_zarr=_zarr_reason(name, array),
        chunk_count=stored_chunk.of,
        decoded_chunk_bytes=math.prod(chunks) * dtype.itemsize,
        stored_chunk=stored_chunk,
        stored_shard=stored_shard,
        steps_per_chunk=chunks[0],
        steps_per_shard=None if shards is None else shards[0],
    )
