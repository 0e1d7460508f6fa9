"""Decode one stored chunk into exactly the bytes its array's metadata promises, or raise.

A numcodecs decoder given an `out` buffer fills only as much of it as the stream holds,
so every decode here checks the stream against the destination's size, before decoding
where the stream declares its size and while decoding where it does not (how, per
compressor: the codec table, `codecs`, and the checks it names in `stream_checks` and
`zstd_frames`). A short, long or truncated stream is an error, never values, and a stream
that declares gigabytes (a decompression bomb) is refused before anything is allocated
for it. Checksums are verified where the data has them: a crc32c codec's before decoding
(`strip_crc32c`), a compressor's own (zstd's content checksum, gzip's crc32, zlib's
adler32) by its library as it decodes.

Errors are `ChunkBytesError`s carrying the expected and actual sizes where known; the
reader turns them into a `CorruptChunkError` naming the variable, chunk, key and store.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numcodecs.abc import Codec

from insitubatch_nodes.io.metadata.zarr_compat import crc32c
from insitubatch_nodes.io.reads.chunk_errors import ChunkBytesError
from insitubatch_nodes.io.reads.codecs import COMPRESSORS, ArrayCompressor
from insitubatch_nodes.io.reads.stream_checks import copy_exact

CHECKED_CODECS = tuple(COMPRESSORS)  # every compressor whose decode is checked here


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


def decode_exact(compressor: Codec | None, data: Any, out: np.ndarray) -> None:
    """Decode `data` into all of `out` (C-contiguous), or raise `ChunkBytesError`: a
    one-off decode that finds the compressor in the table at every call (readers decode
    through a `ChunkDecoder`, which was given its compressor's check once).

    Args:
        compressor: a numcodecs codec whose `codec_id` is in `CHECKED_CODECS`, or `None`
            for bytes stored as they are.
        data: the chunk's stored bytes, one byte per item (bytes, a byte memoryview or a
            1-D uint8 array), any checksum already checked and stripped.
        out: where the decoded bytes go; its size is the size the chunk must decode to.
    """
    if compressor is None:
        copy_exact(data, out)
        return
    ArrayCompressor(COMPRESSORS[str(compressor.codec_id)], compressor).decode(data, out)
