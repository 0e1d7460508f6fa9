"""What a zstd stream says about itself, read from its headers without decoding it.

A stored chunk is one or more zstd frames (most writers make one; seekable and parallel
writers make several), possibly with skippable frames between them. Each frame header
may declare the frame's decoded size. Reading these lets the library check a chunk's
decoded size before decoding (`declared_size`: so a stream of half a chunk, or a
decompression bomb, is refused up front) and check a stream's structure before a decoder
that does not validate its input (nvCOMP) sees it (`is_one_declared_frame`). Python work
here is per frame and per block of up to 128 KiB: it scales with chunk bytes, never with
samples.

What zarr reads as valid is read: chunks of several frames, with skippable frames, or
whose frames declare no size (libzstd then decodes by streaming into the exact
destination and checks that it filled it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from insitubatch_nodes.io.reads.chunk_errors import ChunkBytesError, size_mismatch

ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MAGIC = 0x184D2A50  # the low four bits are free
_BLOCK_MAX = 128 * 1024
_START = struct.Struct("<IB")  # magic number, frame header descriptor
_SKIPPABLE = struct.Struct("<II")  # magic number, bytes that follow
# The frame content size field by its flag (0 means none, unless the frame is a single
# segment: then one byte, here under key 4); a 2-byte field counts from 256.
_SIZE_FIELDS = {
    0: None,
    1: struct.Struct("<H"),
    2: struct.Struct("<I"),
    3: struct.Struct("<Q"),
    4: struct.Struct("<B"),
}


@dataclass(frozen=True)
class ZstdFrame:
    """What one frame's header and block headers say.

    Args:
        content_size: decoded bytes the header declares, or `None` where it declares none.
        end: the offset just past the frame (its checksum included).
        has_checksum: whether the frame ends with a content checksum.
    """

    content_size: int | None
    end: int
    has_checksum: bool


def first_frame_content_size(data: Any, length: int) -> int | None:
    """The decoded size the first frame's header declares (`None`: it declares none), read
    from at most 18 bytes: cheap enough for every chunk.

    Args:
        data: the stored stream (bytes, a byte memoryview or a 1-D uint8 array).
        length: its length in bytes.
    """
    return _header(data, 0, length)[1]


def _header(data: Any, start: int, length: int) -> tuple[int, int | None]:
    """(offset of the first block header, declared content size) of the frame at `start`."""
    if length - start < 6:
        raise ChunkBytesError(f"it is {length - start} bytes, too short for a zstd frame")
    magic, descriptor = _START.unpack_from(data, start)
    if magic != ZSTD_MAGIC:
        raise ChunkBytesError(f"it does not start with a zstd frame (magic {magic:#010x})")
    if descriptor & 0x08:
        raise ChunkBytesError("its zstd frame header sets a reserved bit")
    single_segment = descriptor & 0x20
    size_field = _SIZE_FIELDS[descriptor >> 6 or (4 if single_segment else 0)]
    position = start + 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 0x03]
    if size_field is None:
        return position, None
    if position + size_field.size > length:
        raise ChunkBytesError("its zstd frame header is cut short")
    (content_size,) = size_field.unpack_from(data, position)
    if size_field.size == 2:
        content_size += 256
    return position + size_field.size, content_size


def frame_at(data: Any, start: int = 0) -> ZstdFrame:
    """Walk the block headers of the frame at `start`: where it ends and what it declares.

    Args:
        data: the stored stream.
        start: the offset of the frame's magic number.
    """
    view = memoryview(data).cast("B")
    position, content_size = _header(view, start, len(view))
    has_checksum = bool(view[start + 4] & 0x04)
    regenerated = 0
    while True:
        if position + 3 > len(view):
            raise ChunkBytesError("its zstd frame is cut short (truncated)")
        header = int.from_bytes(view[position : position + 3], "little")
        last, kind, size = header & 1, (header >> 1) & 3, header >> 3
        if kind == 3:
            raise ChunkBytesError("its zstd frame holds a block of a reserved type")
        if size > _BLOCK_MAX:
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


def frames(data: Any) -> list[ZstdFrame]:
    """Every frame of a stream, skippable frames passed over; a stream that does not
    consist of whole frames is an error.

    Args:
        data: the stored stream.
    """
    view = memoryview(data).cast("B")
    found: list[ZstdFrame] = []
    position = 0
    while position < len(view):
        if len(view) - position >= _SKIPPABLE.size:
            magic, size = _SKIPPABLE.unpack_from(view, position)
            if magic & 0xFFFFFFF0 == _SKIPPABLE_MAGIC:
                position += _SKIPPABLE.size + size
                continue
        frame = frame_at(view, position)
        found.append(frame)
        position = frame.end
    if position != len(view):
        raise ChunkBytesError("its last skippable zstd frame runs past its end (truncated)")
    if not found:
        raise ChunkBytesError("it holds no zstd frame")
    return found


def total_content_size(data: Any) -> int | None:
    """The decoded size all frames declare together, or `None` if any declares none (what
    libzstd's `ZSTD_findDecompressedSize` gives, and what numcodecs decodes into).

    Args:
        data: the stored stream.
    """
    sizes = [frame.content_size for frame in frames(data)]
    return None if None in sizes else sum(size for size in sizes if size is not None)


def declared_size(data: Any, length: int, expected: int) -> int | None:
    """The decoded size a zstd chunk declares, all frames together, or `None` if one
    declares none (`stream_checks.DeclaredSizeReader`). The first frame's header settles
    the usual one-frame chunk: numcodecs decodes into the sum of all frames' sizes, so more
    frames after a first that declares the whole chunk make it fail, never fill short.

    Args:
        data: the stored stream.
        length: its length in bytes.
        expected: the bytes the chunk must decode to.
    """
    try:
        if first_frame_content_size(data, length) == expected:
            return expected
    except ChunkBytesError:
        pass  # a skippable frame first, or damage: the walk over every frame says which
    return total_content_size(data)


def is_one_declared_frame(data: Any, expected: int) -> bool:
    """Whether `data` is exactly one frame, its block headers well formed, that declares
    `expected` decoded bytes and carries no content checksum: all a decoder that checks
    nothing (nvCOMP) may be given. `False` for any other stream, valid or not, never an
    error: the host decodes those, and its decode checks them (`declared_size`).

    Args:
        data: the stored stream (a crc32c codec's checksum already stripped).
        expected: the bytes the chunk must decode to.
    """
    try:
        frame = frame_at(data)
    except ChunkBytesError:
        return False
    return frame.end == len(data) and frame.content_size == expected and not frame.has_checksum
