"""Where each inner chunk of a Zarr v3 shard lies, from the shard's index.

A shard object holds its inner chunks back to back plus an index of `(offset, nbytes)`
pairs, one per inner chunk in C order over the shard's chunk grid, at its start or end
(`2**64 - 1` twice marks a chunk never written). Knowing the index, a reader fetches only
the inner chunks it needs by byte range instead of the whole shard.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import zarr

from insitubatch_nodes.io.chunk_codec import ChunkDecoder, decoder_for_v3_codecs
from insitubatch_nodes.io.zarr_compat import fill_scalar, native_dtype, plain_value

EMPTY = np.uint64(2**64 - 1)


@dataclass(frozen=True)
class ShardLayout:
    """How an array's shards are laid out, and how to decode one inner chunk."""

    inner: ChunkDecoder
    chunks_per_shard: tuple[int, ...]
    index_at_end: bool
    index_byteorder: str  # "<" or ">"
    index_checksum: bool

    @property
    def index_nbytes(self) -> int:
        return 16 * int(np.prod(self.chunks_per_shard)) + (4 if self.index_checksum else 0)

    def locate(self, inner_coords: tuple[int, ...]) -> tuple[tuple[int, ...], int]:
        """The shard holding inner chunk `inner_coords`, and the chunk's slot in its index."""
        shard = tuple(c // n for c, n in zip(inner_coords, self.chunks_per_shard, strict=True))
        within = tuple(c % n for c, n in zip(inner_coords, self.chunks_per_shard, strict=True))
        return shard, int(np.ravel_multi_index(within, self.chunks_per_shard))

    def parse_index(self, raw: bytes | memoryview) -> np.ndarray:
        """`(slots, 2)` uint64 array of (offset, nbytes); the checksum is left to the
        decoder of each chunk, which fails on corrupt bytes anyway."""
        count = int(np.prod(self.chunks_per_shard))
        if len(raw) != self.index_nbytes:
            raise ValueError(f"shard index is {len(raw)} bytes, expected {self.index_nbytes}")
        table = np.frombuffer(raw, dtype=f"{self.index_byteorder}u8", count=2 * count)
        return table.astype(np.uint64).reshape(count, 2)


def shard_layout(array: zarr.AsyncArray) -> ShardLayout | None:  # type: ignore[type-arg]
    """The layout of `array`'s shards if it is sharded once with inner chunks we decode
    ourselves and a plain index; `None` otherwise (zarr reads those)."""
    metadata = array.metadata
    if metadata.zarr_format != 3 or len(metadata.codecs) != 1:
        return None
    sharding = metadata.codecs[0]
    if type(sharding).__name__ != "ShardingCodec":
        return None
    dtype = native_dtype(metadata)
    if dtype.hasobject or dtype.kind in "USV":
        return None
    inner_shape = tuple(sharding.chunk_shape)
    inner = decoder_for_v3_codecs(
        tuple(sharding.codecs), dtype, inner_shape, fill_scalar(metadata, dtype)
    )
    index_codecs = [type(codec).__name__ for codec in sharding.index_codecs]
    if inner is None or index_codecs not in (["BytesCodec"], ["BytesCodec", "Crc32cCodec"]):
        return None
    endian = plain_value(getattr(sharding.index_codecs[0], "endian", "little"))
    shard_shape = tuple(metadata.chunk_grid.chunk_shape)
    return ShardLayout(
        inner=inner,
        chunks_per_shard=tuple(s // c for s, c in zip(shard_shape, inner_shape, strict=True)),
        index_at_end=plain_value(sharding.index_location) == "end",
        index_byteorder=">" if endian == "big" else "<",
        index_checksum=len(index_codecs) == 2,
    )


def chunk_span(index: np.ndarray, slot: int) -> tuple[int, int] | None:
    """Bytes `[start, stop)` of the inner chunk in `slot`, or `None` if it was never written."""
    offset, nbytes = index[slot]
    if offset == EMPTY and nbytes == EMPTY:
        return None
    return int(offset), int(offset + nbytes)
