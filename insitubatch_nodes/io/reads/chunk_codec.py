"""Decode stored chunk bytes straight into a block buffer, with numcodecs, off the loop.

zarr's own read path costs 100-860 us of Python per chunk; for the layouts nearly every
archive uses (one compressor or none, optionally a crc32c checksum, no filters, C order,
no sharding) a chunk is just `decompress -> reinterpret -> copy`, which numcodecs does
with the GIL released. Every decode is verified (`verified_decode`): a chunk that does not
decode to exactly its bytes is an error, never values. Arrays with any other layout, or a
compressor whose output we cannot check, get `None` from `fast_decoder`: sharded arrays
whose inner chunks qualify are read by `shard_reader`, the rest through zarr.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass
from typing import Any

import numcodecs
import numpy as np
import zarr
from numcodecs.abc import Codec

from insitubatch_nodes.core.read_plan import Keep
from insitubatch_nodes.io.metadata.zarr_compat import fill_scalar, native_dtype, plain_value
from insitubatch_nodes.io.reads.verified_decode import CHECKED_CODECS, decode_exact, strip_crc32c


@dataclass(frozen=True)
class ChunkDecoder:
    """How to turn one stored chunk of an array into numbers.

    Args:
        compressor: the numcodecs codec of the stored bytes (`None`: stored as they are).
        dtype: the stored element type, byte order included.
        chunk_shape: the shape every stored chunk has (edge chunks are padded to it).
        fill_value: what a chunk never written reads as.
        checksum: whether each stored chunk ends with a crc32c of the rest (zarr's
            `crc32c` codec), verified before decoding.
    """

    compressor: Codec | None
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
            decode_exact(self.compressor, stored, destination)  # no intermediate copy
            return
        chunk = _scratch_chunk(self.chunk_shape, self.dtype)
        decode_exact(self.compressor, stored, chunk)
        destination[...] = chunk[keep]


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


def _v3_compressor(codec: Any) -> Codec | None:
    name = type(codec).__name__
    if name == "ZstdCodec":
        return numcodecs.Zstd(level=codec.level, checksum=bool(codec.checksum))
    if name == "BloscCodec":
        return numcodecs.Blosc(
            cname=str(plain_value(codec.cname)),
            clevel=codec.clevel,
            shuffle={"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[
                str(plain_value(codec.shuffle))
            ],
            blocksize=codec.blocksize,
        )
    if name == "GzipCodec":
        return numcodecs.GZip(level=codec.level)
    raise LookupError(name)


def decoder_for_v3_codecs(
    codecs: tuple[Any, ...], dtype: np.dtype[Any], chunk_shape: tuple[int, ...], fill: Any
) -> ChunkDecoder | None:
    """A decoder for a v3 codec chain `BytesCodec` [+ one compressor] [+ `Crc32cCodec`],
    else `None`.

    Args:
        codecs: the array's (or a shard's inner) codec chain.
        dtype: the stored element type.
        chunk_shape: the stored chunk shape.
        fill: the fill value.
    """
    serializer, *rest = codecs or (None,)
    checksum = bool(rest) and type(rest[-1]).__name__ == "Crc32cCodec"
    if checksum:
        rest = rest[:-1]
    if type(serializer).__name__ != "BytesCodec" or len(rest) > 1:
        return None  # sharding, transpose, filters: not ours to decode
    endian = plain_value(getattr(serializer, "endian", None))
    if endian is not None and dtype.itemsize > 1:
        dtype = dtype.newbyteorder("<" if endian == "little" else ">")
    try:
        compressor = _v3_compressor(rest[0]) if rest else None
    except LookupError:
        return None
    return ChunkDecoder(compressor, dtype, chunk_shape, fill, checksum)


def fast_decoder(array: zarr.AsyncArray) -> ChunkDecoder | None:  # type: ignore[type-arg]
    """A decoder for `array`'s stored chunks if their layout is one we decode ourselves."""
    metadata = array.metadata
    dtype = native_dtype(metadata)
    if dtype.hasobject or dtype.kind in "USV":
        return None
    fill = fill_scalar(metadata, dtype)
    if metadata.zarr_format == 2:
        compressor = metadata.compressor
        if metadata.filters or metadata.order != "C":
            return None
        if compressor is not None and str(compressor.codec_id) not in CHECKED_CODECS:
            return None  # zarr decodes it, and checks the chunk's shape
        return ChunkDecoder(compressor, dtype, tuple(metadata.chunks), fill)
    chunk_shape = tuple(metadata.chunk_grid.chunk_shape)
    return decoder_for_v3_codecs(tuple(metadata.codecs), dtype, chunk_shape, fill)
