"""Stored bytes of a few chunks of an array, measured cheaply: a size request per chunk
object, or the index of a few shards for a sharded array.

`insitubatch inspect` shows them (and what reads in flight the budget holds of them)
before any training run; a few objects spread over the array tell the typical size
without listing a bucket of millions.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import obstore.exceptions
import zarr
from zarr.abc.store import RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype

from insitubatch_nodes.io.metadata.zarr_compat import chunk_key
from insitubatch_nodes.io.reads.chunk_errors import ChunkBytesError
from insitubatch_nodes.io.reads.shard_index import EMPTY, ShardLayout, shard_layout

DEFAULT_SAMPLED_CHUNKS = 3  # stored objects measured per array: a size request each


@dataclass(frozen=True)
class StoredSizes:
    """Stored bytes of a few chunks (or shards), measured, not the whole array's.

    Args:
        how: what was measured: "chunk objects" (a size request per chunk), "shard
            indexes" (inner chunk sizes from the index of a few shards), or "shard size /
            chunks per shard" (when the index is not one the library reads).
        sampled: stored objects (or index entries) measured.
        missing: of those, never written (they read as the fill value).
        of: how many there are in the array.
        mean: mean bytes of those present, or None when none is.
        smallest: fewest bytes among them, or None.
        largest: most bytes among them, or None.
        failed: why nothing could be measured (the store refused a size request, say),
            or None. The rest of the report does not depend on it, so it is not an error.
    """

    how: str
    sampled: int
    missing: int
    of: int
    mean: float | None
    smallest: int | None
    largest: int | None
    failed: str | None = None

    @classmethod
    def unmeasured(cls, how: str, of: int, why: str) -> StoredSizes:
        """Sizes that could not be measured, and why.

        Args:
            how: what was to be measured (see the class).
            of: how many there are in the array.
            why: the reason, for the report.
        """
        return cls(how, 0, 0, of, None, None, None, why)

    @classmethod
    def of_sizes(cls, how: str, sizes: Sequence[int | None], of: int) -> StoredSizes:
        """Summarise measured sizes (None for an object never written).

        Args:
            how: what was measured (see the class).
            sizes: one per measured object, None where it is missing.
            of: how many there are in the array.
        """
        present = [s for s in sizes if s is not None]
        return cls(
            how,
            len(sizes),
            len(sizes) - len(present),
            of,
            float(np.mean(present)) if present else None,
            min(present) if present else None,
            max(present) if present else None,
        )


def sample_coords(counts: Sequence[int], how_many: int) -> list[tuple[int, ...]]:
    """`how_many` coordinates spread evenly (first, ..., last in C order) over a grid of
    `counts` chunks per axis; every one when the grid has no more.

    Args:
        counts: chunks (or shards) per axis.
        how_many: coordinates wanted.
    """
    total = math.prod(counts)
    if total == 0:
        return []
    if total <= how_many:
        picks = range(total)
    elif how_many == 1:
        picks = range(1)
    else:
        picks = sorted({round(i * (total - 1) / (how_many - 1)) for i in range(how_many)})
    return [tuple(int(c) for c in np.unravel_index(i, tuple(counts))) for i in picks]


def _grid_to_sample(shape: Sequence[int], outer: Sequence[int]) -> list[int]:
    """Whole chunks per axis where every axis has one, so that a ragged edge chunk (smaller
    when compressed) does not stand for the rest; else every chunk."""
    full = [s // c for s, c in zip(shape, outer, strict=True)]
    if all(f >= 1 for f in full):
        return full
    return [-(-s // c) for s, c in zip(shape, outer, strict=True)]


_NOT_THERE = (FileNotFoundError, obstore.exceptions.NotFoundError)


class _Unmeasured(Exception):
    """A size request the store refused or failed: the sizes stay unknown."""


async def _size_of(store: Store, key: str) -> int | None:
    try:
        return int(await store.getsize(key))
    except _NOT_THERE:
        return None
    except (OSError, obstore.exceptions.BaseError) as err:
        # Some stores answer GET but not HEAD (moto's bucket policies, some HTTP
        # servers); obstore's text is long and echoes the request, so name the kind only.
        raise _Unmeasured(f"{type(err).__name__} asking the size of {key!r}") from None


async def _index_sizes(store: Store, key: str, array: zarr.AsyncArray) -> list[int | None]:  # type: ignore[type-arg]
    """Stored bytes of each inner chunk of shard `key` (None where never written), from
    the shard's index: one ranged read of a few bytes per inner chunk."""
    layout = shard_layout(array)
    assert isinstance(layout, ShardLayout)
    size = layout.index_nbytes
    where = SuffixByteRequest(size) if layout.index_at_end else RangeByteRequest(0, size)
    try:
        found = await store.get(key, default_buffer_prototype(), byte_range=where)
        if found is None:  # the shard was never written: every inner chunk is missing
            return [None] * math.prod(layout.chunks_per_shard)
        index = layout.parse_index(found.to_bytes())
    except ChunkBytesError as err:
        raise _Unmeasured(f"the index of shard {key!r} is unreadable: {err.reason}") from None
    except (OSError, obstore.exceptions.BaseError) as err:
        raise _Unmeasured(f"{type(err).__name__} reading the index of {key!r}") from None
    empty = (index[:, 0] == EMPTY) & (index[:, 1] == EMPTY)
    return [
        None if e else int(n) for e, n in zip(empty.tolist(), index[:, 1].tolist(), strict=True)
    ]


async def _measure(
    store: Store,
    array: zarr.Array,
    how_many: int,
) -> tuple[StoredSizes, StoredSizes | None]:
    """Stored sizes of a few of `array`'s chunks (and shards): size requests, all at once;
    for a sharded array whose index the library reads, the sizes of the inner chunks of a
    few shards, from their indexes."""
    inner = tuple(array.chunks)
    chunk_count = math.prod(-(-s // c) for s, c in zip(array.shape, inner, strict=True))
    shards = array.shards
    outer = inner if shards is None else tuple(shards)
    coords = sample_coords(_grid_to_sample(array.shape, outer), how_many)
    prefix = array.async_array.store_path.path
    keys = [chunk_key(array.metadata, prefix, c) for c in coords]
    try:
        sizes = await asyncio.gather(*(_size_of(store, key) for key in keys))
    except _Unmeasured as err:
        return StoredSizes.unmeasured("chunk objects", chunk_count, str(err)), None
    if shards is None:
        return StoredSizes.of_sizes("chunk objects", sizes, chunk_count), None
    shard_count = math.prod(-(-s // c) for s, c in zip(array.shape, outer, strict=True))
    per_shard = math.prod(s // c for s, c in zip(outer, inner, strict=True))
    stored_shard = StoredSizes.of_sizes("shard objects", sizes, shard_count)
    if not isinstance(shard_layout(array.async_array), ShardLayout):
        averaged = [None if s is None else round(s / per_shard) for s in sizes]
        how = "shard size / chunks per shard"
        return StoredSizes.of_sizes(how, averaged, chunk_count), stored_shard
    try:
        indexes = await asyncio.gather(
            *(_index_sizes(store, key, array.async_array) for key in keys)
        )
    except _Unmeasured as err:
        return StoredSizes.unmeasured("shard indexes", chunk_count, str(err)), stored_shard
    entries = [size for index in indexes for size in index]
    return StoredSizes.of_sizes("shard indexes", entries, chunk_count), stored_shard


async def measure_stored_sizes(
    store: Store, arrays: Mapping[str, zarr.Array], how_many: int
) -> dict[str, tuple[StoredSizes, StoredSizes | None]]:
    """Per array, the stored sizes of `how_many` chunks (inner chunks when sharded) and,
    when sharded, of their shards; measured all at once.

    Args:
        store: the store the arrays are in.
        arrays: the arrays, by name.
        how_many: chunk objects (or shards) to measure per array.
    """
    found = await asyncio.gather(*(_measure(store, a, how_many) for a in arrays.values()))
    return dict(zip(arrays, found, strict=True))
