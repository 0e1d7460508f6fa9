"""Decode one stored chunk into exactly the bytes its array's metadata promises, or raise.

A numcodecs decoder given an `out` buffer fills only as much of it as the stream holds: a
zstd, blosc or lz4 stream that decodes to half the chunk leaves the other half of a reused
block buffer as it was (another chunk's values), and nothing says so. Every decode here
therefore checks the size the stream declares (zstd frame header, blosc and lz4 headers)
against the destination *before* decoding, and the codec library then checks the stream
against its own declaration, so a short, long or truncated stream is an error, never
values. Checking first also bounds memory: a stream that declares gigabytes (a
decompression bomb) is refused before anything is allocated for it. gzip and zlib carry
no size that can be trusted up front; they are inflated with a bound of one byte more than
the chunk. Checksums are verified where the data has them: a crc32c codec's before
decoding, zstd's content checksum by libzstd, gzip's crc32 and zlib's adler32 by zlib.

Errors are `ChunkBytesError`s carrying the expected and actual sizes where known; the
reader turns them into a `CorruptChunkError` naming the variable, chunk, key and store.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitubatch_nodes.io.zarr_compat import crc32c

ZSTD_MAGIC = 0xFD2FB528
_ZSTD_START = struct.Struct("<IB")  # magic number, frame header descriptor
# The frame content size field, by its flag (0 means none, unless the frame is a single
# segment: then one byte, here under key 4); a 2-byte field counts from 256.
_ZSTD_SIZE_FIELDS = {
    0: None,
    1: struct.Struct("<H"),
    2: struct.Struct("<I"),
    3: struct.Struct("<Q"),
    4: struct.Struct("<B"),
}
_BLOSC_SIZES = struct.Struct("<4xI4xI")  # decoded bytes, stored bytes (header included)
_LZ4_SIZE = struct.Struct("<i")  # numcodecs' LZ4 prefixes the decoded size
_BLOSC_HEADER_NBYTES = 16
_ZSTD_BLOCK_MAX = 128 * 1024


class ChunkBytesError(ValueError):
    """Stored bytes that do not decode to their chunk.

    Args:
        reason: what is wrong, in words a user can act on.
        expected_nbytes: the decoded size the array's metadata needs, when it applies.
        actual_nbytes: the size the stored bytes declare or decode to, when known.
    """

    def __init__(
        self, reason: str, *, expected_nbytes: int | None = None, actual_nbytes: int | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.expected_nbytes = expected_nbytes
        self.actual_nbytes = actual_nbytes


def size_mismatch(expected: int, actual: int, what: str = "decodes to") -> ChunkBytesError:
    """The error for a chunk whose bytes give `actual` bytes where `expected` are needed."""
    return ChunkBytesError(
        f"it {what} {actual} bytes where its array's metadata needs {expected}",
        expected_nbytes=expected,
        actual_nbytes=actual,
    )


def strip_crc32c(data: bytes | memoryview) -> memoryview:
    """`data` less its trailing crc32c checksum (zarr's `crc32c` codec), once it matches."""
    view = memoryview(data).cast("B")
    if len(view) < 4:
        raise ChunkBytesError(f"it is {len(view)} bytes, too short to hold its crc32c checksum")
    stored = int.from_bytes(view[-4:], "little")
    if crc32c(view[:-4]) != stored:
        raise ChunkBytesError("its crc32c checksum does not match its bytes")
    return view[:-4]


@dataclass(frozen=True)
class ZstdFrame:
    """What a zstd frame's header and block headers say, read without decoding.

    Args:
        content_size: decoded bytes the header declares, or `None` where it declares none.
        end: the offset just past the frame (its checksum included).
        has_checksum: whether the frame ends with a content checksum.
    """

    content_size: int | None
    end: int
    has_checksum: bool


def zstd_content_size(data: Any) -> int | None:
    """The decoded size a zstd stream's first frame header declares (`None`: it declares
    none), read from at most 18 bytes: cheap enough for every chunk."""
    return _zstd_header(data, len(data))[1]


def _zstd_header(data: Any, length: int) -> tuple[int, int | None]:
    """(offset of the first block header, declared content size) of the frame `data` (of
    `length` bytes) starts with."""
    if length < 6:
        raise ChunkBytesError(f"it is {length} bytes, too short for a zstd frame")
    magic, descriptor = _ZSTD_START.unpack_from(data)
    if magic != ZSTD_MAGIC:
        raise ChunkBytesError(f"it does not start with a zstd frame (magic {magic:#010x})")
    if descriptor & 0x08:
        raise ChunkBytesError("its zstd frame header sets a reserved bit")
    single_segment = descriptor & 0x20
    size_field = _ZSTD_SIZE_FIELDS[descriptor >> 6 or (4 if single_segment else 0)]
    position = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
    if size_field is None:
        return position, None
    if position + size_field.size > length:
        raise ChunkBytesError("its zstd frame header is cut short")
    (content_size,) = size_field.unpack_from(data, position)
    if size_field.size == 2:
        content_size += 256
    return position + size_field.size, content_size


def zstd_frame(data: bytes | memoryview) -> ZstdFrame:
    """Walk the first frame's block headers: where it ends and what it declares.

    A decoder that does not validate its input (nvCOMP decodes only well-formed streams)
    gets only streams whose structure is checked here first. Python work per block; a
    block holds up to 128 KiB, so it scales with chunk bytes, not samples.
    """
    view = memoryview(data).cast("B")
    position, content_size = _zstd_header(view, len(view))
    has_checksum = bool(view[4] & 0x04)
    regenerated = 0
    while True:
        if position + 3 > len(view):
            raise ChunkBytesError("its zstd frame is cut short (truncated)")
        header = int.from_bytes(view[position : position + 3], "little")
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3:
            raise ChunkBytesError("its zstd frame holds a block of a reserved type")
        if size > _ZSTD_BLOCK_MAX:
            raise ChunkBytesError(f"its zstd frame holds a block of {size} bytes (at most 128 KiB)")
        position += 3 + (1 if kind == 1 else size)
        if kind in (0, 1):  # raw and run-length blocks regenerate `size` bytes
            regenerated += size
        if last:
            break
    position += 4 if has_checksum else 0
    if position > len(view):
        raise ChunkBytesError("its zstd frame is cut short (truncated)")
    if content_size is not None and regenerated > content_size:
        raise size_mismatch(content_size, regenerated, "holds blocks of at least")
    return ZstdFrame(content_size, position, has_checksum)


def check_single_zstd_frame(data: bytes | memoryview, expected: int) -> None:
    """Refuse a zstd stream unless it is one well-formed frame, all of `data`, declaring
    `expected` decoded bytes: what a decoder that neither validates its input nor reports
    sizes (nvCOMP) may be given.

    Args:
        data: the chunk's stored stream.
        expected: the bytes the chunk must decode to.
    """
    frame = zstd_frame(data)
    if frame.content_size is None:
        raise ChunkBytesError(
            "its zstd frame declares no decoded size, so it cannot be checked before a GPU "
            "decode; read this array with decode='cpu'"
        )
    if frame.content_size != expected:
        raise size_mismatch(expected, frame.content_size, "declares")
    if frame.end != len(data):
        raise ChunkBytesError(
            f"{len(data) - frame.end} bytes follow its zstd frame (one frame per chunk expected)"
        )


def _zstd_declared(data: Any, length: int) -> int | None:
    # Without a declared size, numcodecs (>= 0.16) decodes by streaming into `out` and
    # fails unless the stream fills it exactly.
    return _zstd_header(data, length)[1]


def _blosc_declared(data: Any, length: int) -> int:
    if length < _BLOSC_SIZES.size:
        raise ChunkBytesError(f"it is {length} bytes, too short for a blosc header")
    declared, stored = _BLOSC_SIZES.unpack_from(data)
    if stored != length:
        raise ChunkBytesError(
            f"its blosc header says {stored} stored bytes but {length} are stored "
            f"(truncated or extended)"
        )
    return int(declared)


def _lz4_declared(data: Any, length: int) -> int:
    if length < _LZ4_SIZE.size:
        raise ChunkBytesError(f"it is {length} bytes, too short for an lz4 header")
    return int(_LZ4_SIZE.unpack_from(data)[0])


# Codecs whose streams declare their decoded size up front: read it, check it, then let the
# codec library decode (it checks the stream against its own declaration).
_DECLARED_SIZE = {"zstd": _zstd_declared, "blosc": _blosc_declared, "lz4": _lz4_declared}


def _inflate_exactly(view: memoryview, out: np.ndarray, wbits: int) -> None:
    """Inflate a gzip or zlib stream into `out`, never producing more than one byte past it."""
    expected = out.nbytes
    inflater = zlib.decompressobj(wbits)
    try:
        produced = inflater.decompress(view, expected)
        full_but_open = len(produced) == expected and not inflater.eof
        if full_but_open and inflater.decompress(inflater.unconsumed_tail, 1):
            raise ChunkBytesError(
                f"it decodes to more than the {expected} bytes its array's metadata needs",
                expected_nbytes=expected,
            )
    except zlib.error as err:
        raise ChunkBytesError(f"its stream does not decode: {err}") from err
    if not inflater.eof:
        raise ChunkBytesError(
            f"its stream ends before its end marker (truncated) after {len(produced)} bytes",
            expected_nbytes=expected,
            actual_nbytes=len(produced),
        )
    if len(produced) != expected:
        raise size_mismatch(expected, len(produced))
    if inflater.unused_data:
        raise ChunkBytesError(f"{len(inflater.unused_data)} bytes follow its compressed stream")
    out[...] = np.frombuffer(produced, dtype=np.uint8)


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
    declared = declared_size(data, length)
    if declared is not None and declared != expected:
        raise size_mismatch(expected, declared, "declares")
    try:
        compressor.decode(data, out=out)
    except Exception as err:
        raise ChunkBytesError(f"its {codec_id} stream does not decode: {err}") from err
