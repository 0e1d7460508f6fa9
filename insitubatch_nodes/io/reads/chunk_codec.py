"""Decode stored chunk bytes straight into a block buffer, with numcodecs, off the loop.

zarr's own read path costs 100-860 us of Python per chunk; for the layouts nearly every
archive uses (one compressor or none, optionally a crc32c checksum, no filters, C order,
no sharding) a chunk is just `decompress -> reinterpret -> copy`, which numcodecs does
with the GIL released. Which compressors qualify, and how each stream is checked, is the
codec table's to say (`codecs`); every decode is verified (`verified_decode`): a chunk
that does not decode to exactly its bytes is an error, never values. For an array of any
other layout `fast_decoder` gives the reason instead (`ZarrDecodes`): sharded arrays whose
inner chunks qualify are read by `shard_reader`, the rest through zarr.
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import zarr

from insitubatch_nodes.core.read_plan import Keep
from insitubatch_nodes.io.metadata.zarr_compat import fill_scalar, native_dtype
from insitubatch_nodes.io.reads.codecs import (
    CHECKSUM,
    COMPRESSORS,
    SERIALIZER,
    SHARDING,
    ArrayCompressor,
    ZarrDecodes,
    not_decoded,
    v2_compressor,
    v3_compressor,
)
from insitubatch_nodes.io.reads.stream_checks import copy_exact
from insitubatch_nodes.io.reads.verified_decode import strip_crc32c


@dataclass(frozen=True)
class ChunkDecoder:
    """How to turn one stored chunk of an array into numbers.

    Args:
        compressor: the compressor of the stored bytes, as the codec table decodes it
            (`None`: stored as they are).
        dtype: the stored element type, byte order included.
        chunk_shape: the shape every stored chunk has (edge chunks are padded to it).
        fill_value: what a chunk never written reads as.
        checksum: whether each stored chunk ends with a crc32c of the rest (zarr's
            `crc32c` codec), verified before decoding.
    """

    compressor: ArrayCompressor | None
    dtype: np.dtype[Any]
    chunk_shape: tuple[int, ...]
    fill_value: Any
    checksum: bool = False

    @functools.cached_property
    def chunk_nbytes(self) -> int:
        """The bytes one stored chunk decodes to (asked for every chunk read: computed once)."""
        return int(np.prod(self.chunk_shape, dtype=np.int64)) * self.dtype.itemsize

    @functools.cached_property
    def stored_bound(self) -> int:
        """More bytes than any valid stored chunk takes: compressors store data they cannot
        shrink as raw blocks, a few bytes of framing per block and header on top."""
        nbytes = self.chunk_nbytes
        return nbytes + nbytes // 128 + (1 << 16) + (4 if self.checksum else 0)

    def decode_into(
        self, data: bytes | memoryview | None, destination: np.ndarray, keep: Keep
    ) -> None:
        """Write the chunk's `keep` part into `destination`, or raise `ChunkBytesError` if
        the stored bytes are not exactly one chunk. A whole chunk decodes in place; a part
        (an edge chunk, padded in storage; some rows; picked positions) through this
        thread's scratch chunk, so memory beyond the kept part is one chunk per thread.

        Args:
            data: the stored bytes, or `None` for a chunk never written (the fill value).
            destination: where the part goes (its region of a block buffer).
            keep: the part of the stored chunk kept (`read_plan.chunk_regions`).
        """
        if data is None:
            destination[...] = self.fill_value
            return
        stored = strip_crc32c(data) if self.checksum else data
        whole = destination.shape == self.chunk_shape and destination.flags.c_contiguous
        if whole and destination.dtype == self.dtype:
            self._decode(stored, destination)  # no intermediate copy
            return
        chunk = _scratch_chunk(self.chunk_shape, self.dtype)
        self._decode(stored, chunk)
        destination[...] = chunk[keep]

    @functools.cached_property
    def _decode(self) -> Callable[[Any, np.ndarray], None]:
        """The stream's checked decode, bound once: a chunk's decode makes no look-up."""
        if self.compressor is None:
            return copy_exact
        return functools.partial(self.compressor.kind.stream.decode, self.compressor.codec)


_scratches = threading.local()


def _scratch_chunk(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """This thread's scratch memory as one chunk of `shape` (grown, never shrunk: the
    largest chunk the thread decoded in part; reused, as fresh memory's page faults cost
    as much as the decode's copy)."""
    nbytes = math.prod(shape) * dtype.itemsize
    scratch: np.ndarray | None = getattr(_scratches, "buffer", None)
    if scratch is None or scratch.nbytes < nbytes:
        scratch = _scratches.buffer = np.empty(max(nbytes, 1), dtype=np.uint8)
    return scratch[:nbytes].view(dtype).reshape(shape)


def numeric_dtype(metadata: Any) -> np.dtype[Any] | ZarrDecodes:
    """The stored element type of an array whose values the library decodes itself
    (numbers), or why zarr decodes them (strings, dates as objects).

    Args:
        metadata: the array's zarr metadata.
    """
    dtype = native_dtype(metadata)
    if dtype.hasobject or dtype.kind in "USV":
        return ZarrDecodes(f"its values ({dtype}) are not numbers the library decodes itself")
    return dtype


def chain_decoder(
    codecs: Sequence[Mapping[str, Any]],
    dtype: np.dtype[Any],
    chunk_shape: tuple[int, ...],
    fill: Any,
) -> ChunkDecoder | ZarrDecodes:
    """A decoder for a v3 codec chain `bytes` [+ one compressor] [+ `crc32c`], or why
    zarr decodes the chunks.

    Args:
        codecs: the array's (or a shard's inner) codec chain, as its metadata holds it:
            each codec's `name` and `configuration`.
        dtype: the stored element type.
        chunk_shape: the stored chunk shape.
        fill: the fill value.
    """
    names = [str(codec["name"]) for codec in codecs] or ["no serializer"]
    if names[0] != SERIALIZER:
        if names[0] == SHARDING:
            return ZarrDecodes("its chunks are sharded")
        return not_decoded(names[0])
    checksum = len(names) > 1 and names[-1] == CHECKSUM
    serializer, *compressors = codecs[:-1] if checksum else codecs
    if len(compressors) > 1:
        unknown = [n for n in names[1:] if n not in COMPRESSORS and n != CHECKSUM]
        if unknown:
            return not_decoded(unknown[0])
        return ZarrDecodes(
            f"its chunks pass through {' then '.join(names)}: the library decodes one "
            f"compressor at most, and a crc32c only last"
        )
    compressor = v3_compressor(compressors[0]) if compressors else None
    if isinstance(compressor, ZarrDecodes):
        return compressor
    endian = (serializer.get("configuration") or {}).get("endian")
    if endian is not None and dtype.itemsize > 1:
        dtype = dtype.newbyteorder("<" if endian == "little" else ">")
    return ChunkDecoder(compressor, dtype, chunk_shape, fill, checksum)


def v3_codecs(metadata: Any) -> list[dict[str, Any]]:
    """A Zarr v3 array's codec chain as its metadata stores it (`name`, `configuration`):
    what the codec table is keyed by.

    Args:
        metadata: the array's zarr metadata.
    """
    return [codec.to_dict() for codec in metadata.codecs]


def fast_decoder(array: zarr.AsyncArray) -> ChunkDecoder | ZarrDecodes:  # type: ignore[type-arg]
    """A decoder for `array`'s stored chunks if their layout is one we decode ourselves,
    else why zarr decodes them.

    Args:
        array: the opened array.
    """
    metadata = array.metadata
    dtype = numeric_dtype(metadata)
    if isinstance(dtype, ZarrDecodes):
        return dtype
    fill = fill_scalar(metadata, dtype)
    if metadata.zarr_format == 3:
        chunk_shape = tuple(metadata.chunk_grid.chunk_shape)
        return chain_decoder(v3_codecs(metadata), dtype, chunk_shape, fill)
    if metadata.filters:
        named = ", ".join(str(f.codec_id) for f in metadata.filters)
        return ZarrDecodes(f"its filters ({named}) are zarr's to apply")
    if metadata.order != "C":
        return ZarrDecodes("its chunks are stored in F order")
    compressor = None if metadata.compressor is None else v2_compressor(metadata.compressor)
    if isinstance(compressor, ZarrDecodes):
        return compressor  # zarr decodes it, and checks the chunk's shape
    return ChunkDecoder(compressor, dtype, tuple(metadata.chunks), fill)
