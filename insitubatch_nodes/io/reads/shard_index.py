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

from insitubatch_nodes.io.metadata.zarr_compat import fill_scalar
from insitubatch_nodes.io.reads.chunk_codec import (
    ChunkDecoder,
    chain_decoder,
    numeric_dtype,
    v3_codecs,
)
from insitubatch_nodes.io.reads.chunk_errors import ChunkBytesError
from insitubatch_nodes.io.reads.codecs import CHECKSUM, SERIALIZER, SHARDING, ZarrDecodes
from insitubatch_nodes.io.reads.verified_decode import strip_crc32c

EMPTY = np.uint64(2**64 - 1)
_FAR = 2**62  # bytes: larger than any shard object


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

    def parse_index(self, raw: bytes | memoryview, shard_nbytes: int | None = None) -> np.ndarray:
        """`(slots, 2)` uint64 array of (offset, nbytes), once the index is checked: its
        crc32c when it has one, and every entry against the shard (`check_entries`).

        Args:
            raw: the index's stored bytes.
            shard_nbytes: the shard object's size where known (local files), else `None`.
        """
        if len(raw) != self.index_nbytes:
            raise ChunkBytesError(
                f"its shard index is {len(raw)} bytes where {self.index_nbytes} are needed "
                f"(a shard shorter than its index, or another chunk layout)",
                expected_nbytes=self.index_nbytes,
                actual_nbytes=len(raw),
            )
        if self.index_checksum:
            try:
                raw = strip_crc32c(raw)
            except ChunkBytesError as err:
                raise ChunkBytesError(f"its shard index is corrupt: {err.reason}") from err
        count = int(np.prod(self.chunks_per_shard))
        table = np.frombuffer(raw, dtype=f"{self.index_byteorder}u8", count=2 * count)
        index = table.astype(np.uint64).reshape(count, 2)
        self.check_entries(index, shard_nbytes)
        return index

    def check_entries(self, index: np.ndarray, shard_nbytes: int | None) -> None:
        """Refuse an index whose entries cannot describe this shard: half-empty entries,
        inner chunks of no bytes or more than any valid one takes, entries that overlap
        part of another's bytes (entries equal to another are allowed: a writer may store
        identical chunks once), or bytes outside the shard's data. Without a checksum on
        the index, entries swapped between two inner chunks of the same size cannot be told
        from the real ones; zarr writes the checksum by default.

        Args:
            index: the parsed `(slots, 2)` table of (offset, nbytes).
            shard_nbytes: the shard object's size where known, else `None`.
        """
        offsets, sizes = index[:, 0], index[:, 1]
        empty = (offsets == EMPTY) & (sizes == EMPTY)
        half = (offsets == EMPTY) != (sizes == EMPTY)
        if half.any():
            raise self._bad_entry(int(np.flatnonzero(half)[0]), index, "is half empty")
        present = np.flatnonzero(~empty)
        bound = self.inner.stored_bound
        wrong_size = present[(sizes[present] == 0) | (sizes[present] > bound)]
        if wrong_size.size:
            raise self._bad_entry(
                int(wrong_size[0]), index, f"gives a size outside 1 .. {bound} bytes"
            )
        low = 0 if self.index_at_end else self.index_nbytes
        high = _FAR  # past any real object: offsets beyond it cannot overflow a uint64 sum
        if shard_nbytes is not None:
            high = shard_nbytes - (self.index_nbytes if self.index_at_end else 0)
        starts = offsets[present]
        outside = present[(starts < low) | (starts > high) | (starts + sizes[present] > high)]
        if outside.size:
            where = "the shard" if shard_nbytes is None else f"the shard's data ({low}..{high})"
            raise self._bad_entry(int(outside[0]), index, f"points outside {where}")
        order = present[np.lexsort((sizes[present], starts))]
        before, after = order[:-1], order[1:]
        shared = (offsets[after] == offsets[before]) & (sizes[after] == sizes[before])
        overlapping = after[(offsets[after] < offsets[before] + sizes[before]) & ~shared]
        if overlapping.size:
            raise self._bad_entry(int(overlapping[0]), index, "overlaps another entry's bytes")

    def _bad_entry(self, slot: int, index: np.ndarray, what: str) -> ChunkBytesError:
        within = tuple(int(i) for i in np.unravel_index(slot, self.chunks_per_shard))
        offset, nbytes = (int(v) for v in index[slot])
        return ChunkBytesError(
            f"its shard index entry {slot} (inner chunk {within} of the shard: offset "
            f"{offset}, {nbytes} bytes) {what}"
        )


def shard_layout(array: zarr.AsyncArray) -> ShardLayout | ZarrDecodes | None:  # type: ignore[type-arg]
    """The layout of `array`'s shards if it is sharded once with inner chunks we decode
    ourselves and a plain index, else why zarr decodes them; `None` if it is not sharded.

    Args:
        array: the opened array.
    """
    metadata = array.metadata
    if metadata.zarr_format != 3:
        return None
    codecs = v3_codecs(metadata)
    if codecs[0]["name"] != SHARDING:
        return None
    if len(codecs) > 1:
        after = " then ".join(str(codec["name"]) for codec in codecs[1:])
        return ZarrDecodes(f"its shards pass whole through {after}")
    dtype = numeric_dtype(metadata)
    if isinstance(dtype, ZarrDecodes):
        return dtype
    config = codecs[0]["configuration"]
    inner_shape = tuple(config["chunk_shape"])
    if config["codecs"][0]["name"] == SHARDING:
        return ZarrDecodes("its shards' chunks are sharded again")
    inner = chain_decoder(config["codecs"], dtype, inner_shape, fill_scalar(metadata, dtype))
    if isinstance(inner, ZarrDecodes):
        return inner
    index_codecs = [str(codec["name"]) for codec in config["index_codecs"]]
    if index_codecs not in ([SERIALIZER], [SERIALIZER, CHECKSUM]):
        return ZarrDecodes(
            f"its shard index is stored through {' then '.join(index_codecs)}, where the "
            f"library reads bytes and an optional crc32c"
        )
    endian = (config["index_codecs"][0].get("configuration") or {}).get("endian", "little")
    shard_shape = tuple(metadata.chunk_grid.chunk_shape)
    return ShardLayout(
        inner=inner,
        chunks_per_shard=tuple(s // c for s, c in zip(shard_shape, inner_shape, strict=True)),
        index_at_end=config.get("index_location", "end") == "end",
        index_byteorder=">" if endian == "big" else "<",
        index_checksum=len(index_codecs) == 2,
    )


def chunk_span(index: np.ndarray, slot: int) -> tuple[int, int] | None:
    """Bytes `[start, stop)` of the inner chunk in `slot`, or `None` if it was never written."""
    offset, nbytes = index[slot]
    if offset == EMPTY and nbytes == EMPTY:
        return None
    return int(offset), int(offset + nbytes)
