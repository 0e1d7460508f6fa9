"""Decode one stored chunk into exactly the bytes its array's metadata promises, or raise.

A numcodecs decoder given an `out` buffer fills only as much of it as the stream holds: a
zstd, blosc or lz4 stream that decodes to half the chunk leaves the other half of a reused
block buffer as it was (another chunk's values), and nothing says so. Every decode here
therefore checks the size the stream declares (zstd frame headers, blosc and lz4 headers)
against the destination *before* decoding, and the codec library then checks the stream
against its own declaration, so a short, long or truncated stream is an error, never
values. Checking first also bounds memory: a stream that declares gigabytes (a
decompression bomb) is refused before anything is allocated for it. gzip and zlib carry
no size that can be trusted up front; they are inflated with a bound of one byte more than
the chunk. Checksums are verified where the data has them: a crc32c codec's before
decoding, zstd's content checksum by libzstd, gzip's crc32 and zlib's adler32 by zlib.
What zarr reads as valid is read here too: zstd chunks of several frames or with
skippable frames, gzip chunks of several members or with trailing zero padding, zlib
streams followed by other bytes (zlib ignores them).

Errors are `ChunkBytesError`s carrying the expected and actual sizes where known; the
reader turns them into a `CorruptChunkError` naming the variable, chunk, key and store.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import numpy as np

from insitubatch_nodes.io.metadata.zarr_compat import crc32c
from insitubatch_nodes.io.reads.chunk_errors import ChunkBytesError, size_mismatch
from insitubatch_nodes.io.reads.zstd_frames import first_frame_content_size, total_content_size

_BLOSC_SIZES = struct.Struct("<4xI4xI")  # decoded bytes, stored bytes (header included)
_LZ4_SIZE = struct.Struct("<i")  # numcodecs' LZ4 prefixes the decoded size
_GZIP_MAGIC = b"\x1f\x8b"


def check_stored_length(data: Any, limit: int) -> None:
    """Refuse stored bytes longer than any valid chunk before they are decoded.

    Args:
        data: the chunk's stored bytes, or `None` for a chunk never written.
        limit: the most bytes a valid chunk of the array takes (`ChunkDecoder.stored_bound`).
    """
    if data is not None and len(data) > limit:
        raise ChunkBytesError(
            f"it is {len(data)} bytes stored, more than any valid chunk of its array takes "
            f"({limit})",
            actual_nbytes=len(data),
        )


def strip_crc32c(data: bytes | memoryview) -> memoryview:
    """`data` less its trailing crc32c checksum (zarr's `crc32c` codec), once it matches.

    Args:
        data: the chunk's stored bytes, checksum last.
    """
    view = memoryview(data).cast("B")
    if len(view) < 4:
        raise ChunkBytesError(f"it is {len(view)} bytes, too short to hold its crc32c checksum")
    stored = int.from_bytes(view[-4:], "little")
    if crc32c(view[:-4]) != stored:
        raise ChunkBytesError("its crc32c checksum does not match its bytes")
    return view[:-4]


def _zstd_declared(data: Any, length: int, expected: int) -> int | None:
    """The decoded size a zstd chunk declares, all frames together (`None` if one declares
    none: numcodecs then decodes by streaming into the exact destination and checks that
    it filled it). The first frame's header settles the usual one-frame chunk: numcodecs
    decodes into the sum of all frames' sizes, so more frames after a first that declares
    the whole chunk make it fail, never fill short."""
    try:
        if first_frame_content_size(data, length) == expected:
            return expected
    except ChunkBytesError:
        pass  # a skippable frame first, or damage: the walk over every frame says which
    return total_content_size(data)


def _blosc_declared(data: Any, length: int, expected: int) -> int:
    if length < _BLOSC_SIZES.size:
        raise ChunkBytesError(f"it is {length} bytes, too short for a blosc header")
    declared, stored = _BLOSC_SIZES.unpack_from(data)
    if stored != length:
        raise ChunkBytesError(
            f"its blosc header says {stored} stored bytes but {length} are stored "
            f"(truncated or extended)"
        )
    return int(declared)


def _lz4_declared(data: Any, length: int, expected: int) -> int:
    if length < _LZ4_SIZE.size:
        raise ChunkBytesError(f"it is {length} bytes, too short for an lz4 header")
    return int(_LZ4_SIZE.unpack_from(data)[0])


# Codecs whose streams declare their decoded size up front: read it, check it, then let the
# codec library decode (it checks the stream against its own declaration).
_DECLARED_SIZE = {"zstd": _zstd_declared, "blosc": _blosc_declared, "lz4": _lz4_declared}


def _inflate_exactly(view: memoryview, out: np.ndarray, wbits: int) -> None:
    """Inflate a gzip or zlib stream into `out`, never producing more than one byte past it.

    gzip members follow one another until the chunk is full (what Python's gzip module,
    and so zarr, reads), and trailing zero bytes are padding; zlib ignores what follows
    its stream, as `zlib.decompress` does."""
    expected = out.nbytes
    parts: list[bytes] = []
    produced = 0
    rest: Any = view
    while True:
        inflater = zlib.decompressobj(wbits)
        bound = expected - produced + 1
        try:
            part = inflater.decompress(rest, bound)
        except zlib.error as err:
            raise ChunkBytesError(f"its stream does not decode: {err}") from err
        if len(part) == bound:
            raise ChunkBytesError(
                f"it decodes to more than the {expected} bytes its array's metadata needs",
                expected_nbytes=expected,
            )
        produced += len(part)
        parts.append(part)
        if not inflater.eof:
            raise ChunkBytesError(
                f"its stream ends before its end marker (truncated) after {produced} bytes",
                expected_nbytes=expected,
                actual_nbytes=produced,
            )
        rest = inflater.unused_data
        if wbits == zlib.MAX_WBITS or not rest.strip(b"\0"):
            break
        if rest[:2] != _GZIP_MAGIC:
            raise ChunkBytesError(f"{len(rest)} bytes that are not a gzip member follow it")
    if produced != expected:
        raise size_mismatch(expected, produced)
    out[...] = np.frombuffer(parts[0] if len(parts) == 1 else b"".join(parts), dtype=np.uint8)


_INFLATE_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "zlib": zlib.MAX_WBITS}
CHECKED_CODECS = (*_DECLARED_SIZE, *_INFLATE_WBITS)


def decode_exact(compressor: Any, data: Any, out: np.ndarray) -> None:
    """Decode `data` into all of `out` (C-contiguous), or raise `ChunkBytesError`.

    Per-chunk Python here is a header read or two: a few microseconds against the tens
    to hundreds a decode takes.

    Args:
        compressor: a numcodecs codec whose `codec_id` is in `CHECKED_CODECS`, or `None`
            for bytes stored as they are.
        data: the chunk's stored bytes, one byte per item (bytes, a byte memoryview or a
            1-D uint8 array), any checksum already checked and stripped.
        out: where the decoded bytes go; its size is the size the chunk must decode to.
    """
    expected = out.nbytes
    length = len(data)
    if compressor is None:
        if length != expected:
            raise size_mismatch(expected, length, "is")
        out.reshape(-1).view(np.uint8)[...] = np.frombuffer(data, dtype=np.uint8)
        return
    codec_id = compressor.codec_id
    declared_size = _DECLARED_SIZE.get(codec_id)
    if declared_size is None:
        _inflate_exactly(memoryview(data), out.reshape(-1).view(np.uint8), _INFLATE_WBITS[codec_id])
        return
    declared = declared_size(data, length, expected)
    if declared is not None and declared != expected:
        raise size_mismatch(expected, declared, "declares")
    try:
        compressor.decode(data, out=out)
    except Exception as err:
        raise ChunkBytesError(f"its {codec_id} stream does not decode: {err}") from err
