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

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitubatch_nodes.io.zarr_compat import crc32c

ZSTD_MAGIC = 0xFD2FB528
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


def zstd_content_size(data: bytes | memoryview) -> int | None:
    """The decoded size a zstd stream's first frame header declares (`None`: it declares
    none), read from at most 18 bytes: cheap enough for every chunk."""
    view = memoryview(data).cast("B")
    _, content_size = _zstd_header(view, 0)
    return content_size


def _zstd_header(view: memoryview, start: int) -> tuple[int, int | None]:
    """(offset of the first block header, declared content size) of the frame at `start`."""
    if len(view) - start < 6:
        raise ChunkBytesError(f"it is {len(view) - start} bytes, too short for a zstd frame")
    magic = int.from_bytes(view[start : start + 4], "little")
    if magic != ZSTD_MAGIC:
        raise ChunkBytesError(f"it does not start with a zstd frame (magic {magic:#010x})")
    descriptor = view[start + 4]
    if descriptor & 0x08:
        raise ChunkBytesError("its zstd frame header sets a reserved bit")
    single_segment = bool(descriptor & 0x20)
    dictionary_id_bytes = (0, 1, 2, 4)[descriptor & 0x03]
    size_field_bytes = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    position = start + 5 + (0 if single_segment else 1) + dictionary_id_bytes
    if position + size_field_bytes > len(view):
        raise ChunkBytesError("its zstd frame header is cut short")
    if size_field_bytes == 0:
        return position, None
    content_size = int.from_bytes(view[position : position + size_field_bytes], "little")
    if size_field_bytes == 2:
        content_size += 256
    return position + size_field_bytes, content_size


def zstd_frame(data: bytes | memoryview) -> ZstdFrame:
    """Walk the first frame's block headers: where it ends and what it declares.

    A decoder that does not validate its input (nvCOMP decodes only well-formed streams)
    gets only streams whose structure is checked here first. Python work per block; a
    block holds up to 128 KiB, so it scales with chunk bytes, not samples.
    """
    view = memoryview(data).cast("B")
    position, content_size = _zstd_header(view, 0)
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


def _check_declared(codec_id: str, view: memoryview, expected: int) -> None:
    """Refuse a stream whose header declares another decoded size (or is malformed)."""
    if codec_id == "zstd":
        declared = zstd_content_size(view)
        if declared is not None and declared != expected:
            raise size_mismatch(expected, declared, "declares")
        # Without a declared size, numcodecs (>= 0.16) decodes by streaming into `out`
        # and fails unless the stream fills it exactly.
    elif codec_id == "blosc":
        if len(view) < _BLOSC_HEADER_NBYTES:
            raise ChunkBytesError(f"it is {len(view)} bytes, too short for a blosc header")
        declared = int.from_bytes(view[4:8], "little")
        stored = int.from_bytes(view[12:16], "little")
        if stored != len(view):
            raise ChunkBytesError(
                f"its blosc header says {stored} stored bytes but {len(view)} are stored "
                f"(truncated or extended)"
            )
        if declared != expected:
            raise size_mismatch(expected, declared, "declares")
    elif codec_id == "lz4":
        if len(view) < 4:
            raise ChunkBytesError(f"it is {len(view)} bytes, too short for an lz4 header")
        declared = int.from_bytes(view[:4], "little", signed=True)
        if declared != expected:
            raise size_mismatch(expected, declared, "declares")


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
CHECKED_CODECS = ("zstd", "blosc", "lz4", *_INFLATE_WBITS)


def decode_exact(compressor: Any, data: bytes | memoryview, out: np.ndarray) -> None:
    """Decode `data` into all of `out` (C-contiguous), or raise `ChunkBytesError`.

    Args:
        compressor: a numcodecs codec whose `codec_id` is in `CHECKED_CODECS`, or `None`
            for bytes stored as they are.
        data: the chunk's stored bytes (any checksum already checked and stripped).
        out: where the decoded bytes go; its size is the size the chunk must decode to.
    """
    view = memoryview(data).cast("B")
    flat = out.reshape(-1).view(np.uint8)
    expected = flat.nbytes
    if compressor is None:
        if len(view) != expected:
            raise size_mismatch(expected, len(view), "is")
        flat[...] = np.frombuffer(view, dtype=np.uint8)
        return
    codec_id = str(compressor.codec_id)
    wbits = _INFLATE_WBITS.get(codec_id)
    if wbits is not None:
        _inflate_exactly(view, flat, wbits)
        return
    _check_declared(codec_id, view, expected)
    try:
        compressor.decode(view, out=flat)
    except Exception as err:
        raise ChunkBytesError(f"its {codec_id} stream does not decode: {err}") from err
