"""The arrays the library reads itself, and what takes their fetched chunks.

An array qualifies when its stored chunks decode with the library's own verified decoder
(one compressor the codec table knows or none, an optional crc32c, no filters, C order),
directly or as the inner chunks of one level of sharding. Everything else is read through
zarr, by the one rule here (`stored_array`), which says why: the readers take zarr's path
for it, and `insitubatch inspect` prints the reason. The fetcher (`stored_chunks`), the
chunk cache in front of it (`cached_chunks`) and both block readers share these names, so
they live apart from all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import zarr

from insitubatch_nodes.io.metadata.zarr_compat import chunk_key
from insitubatch_nodes.io.reads.chunk_codec import ChunkDecoder, fast_decoder
from insitubatch_nodes.io.reads.codecs import ZarrDecodes
from insitubatch_nodes.io.reads.shard_index import ShardLayout, shard_layout
from insitubatch_nodes.io.reads.shard_reader import Loaded


@dataclass(frozen=True, eq=False)
class StoredArray:
    """An array whose stored chunks the library fetches and decodes itself.

    Args:
        name: the variable's name.
        array: the opened zarr array (its metadata and path).
        decoder: how one stored chunk decodes (an inner chunk's, when sharded).
        shards: the shard layout, or None when every chunk is its own object.
    """

    name: str
    array: zarr.AsyncArray  # type: ignore[type-arg]
    decoder: ChunkDecoder
    shards: ShardLayout | None = None

    def key(self, coords: tuple[int, ...]) -> str:
        """The key of the stored object holding chunk `coords` (its shard when sharded).

        Args:
            coords: the chunk's coordinates in the array's (inner) chunk grid.
        """
        stored = coords if self.shards is None else self.shards.locate(coords)[0]
        return chunk_key(self.array.metadata, self.array.store_path.path, stored)


def stored_array(name: str, array: zarr.AsyncArray) -> StoredArray | ZarrDecodes:  # type: ignore[type-arg]
    """`array` as the library reads it, or why zarr must decode it (filters, F order,
    codecs the codec table does not know, nested sharding).

    Args:
        name: the variable's name.
        array: the opened zarr array.
    """
    layout = shard_layout(array)
    if layout is None:  # not sharded
        decoder = fast_decoder(array)
        if isinstance(decoder, ZarrDecodes):
            return decoder
        return StoredArray(name, array, decoder)
    if isinstance(layout, ZarrDecodes):
        return layout
    return StoredArray(name, array, layout.inner, layout)


ChunkSink = Callable[[StoredArray, Loaded], None]
"""Takes fetched chunks of one array in a decode thread: (read, stored bytes, or None for a
chunk never written), the bytes valid only during the call."""
