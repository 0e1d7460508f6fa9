"""How a compressor's stored stream is decoded into a destination of known size, checked.

A numcodecs decoder given an `out` buffer fills only as much of it as the stream holds: a
zstd, blosc or lz4 stream that decodes to half the chunk leaves the other half of a reused
block buffer as it was (another chunk's values), and nothing says so. Streams come in two
kinds, and the codec table (`codecs`) says which kind each compressor writes:

- `DeclaredSize`: the stream declares its decoded size up front (zstd frame headers,
  blosc and lz4 headers). The declaration is checked against the destination *before*
  decoding, and the codec library then checks the stream against its own declaration, so
  a short, long or truncated stream is an error, never values. Checking first also bounds
  memory: a stream that declares gigabytes (a decompression bomb) is refused before
  anything is allocated for it.
- `BoundedInflate`: gzip and zlib carry no size that can be trusted up front; they are
  inflated with a bound of one byte more than the chunk. zlib checks their own checksums
  (gzip's crc32, zlib's adler32) as it inflates.

What zarr reads as valid is read here too: gzip chunks of several members or with trailing
zero padding, zlib streams followed by other bytes (zlib ignores them); zstd's own rules
are in `zstd_frames`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numcodecs.abc import Codec

from insitubatch_nodes.io.reads.chunk_errors import ChunkBytesError, size_mismatch

_BLOSC_SIZES = struct.Struct("<4xI4xI")  # decoded bytes, stored bytes (header included)
_LZ4_SIZE = struct.Struct("<i")  # numcodecs' LZ4 prefixes the decoded size
_GZIP_MAGIC = b"\x1f\x8b"
GZIP_WBITS = 16 + zlib.MAX_WBITS  # zlib's window bits for a gzip member
ZLIB_WBITS = zlib.MAX_WBITS  # and for a zlib stream

DeclaredSizeReader = Callable[[Any, int, int], int | None]
"""(stored stream, its length, the bytes the chunk must decode to) -> the decoded size the
stream declares, or None where it declares none (the codec library then checks that it
filled the destination); raises `ChunkBytesError` for a stream that cannot be one."""


class StreamCheck(Protocol):
    """Decodes one compressor's stored stream into all of a destination, or raises."""

    def decode(self, codec: Codec, data: Any, out: np.ndarray) -> None:
        """Fill all of `out` from `data`, or raise `ChunkBytesError`.

        Args:
            codec: numcodecs' decoder, configured as the array's metadata says.
            data: the stored stream, one byte per item (bytes, a byte memoryview or a
                1-D uint8 array), any checksum codec's checksum already checked and
                stripped.
            out: where the decoded bytes go (C-contiguous); its size is the size the
                chunk must decode to.
        """
        ...


@dataclass(frozen=True)
class DeclaredSize:
    """Streams that declare their decoded size: read it, check it, then let the codec
    library decode (it checks the stream against its own declaration).

    Args:
        declared: reads the size a stream declares (see `DeclaredSizeReader`).
    """

    declared: DeclaredSizeReader

    def decode(self, codec: Codec, data: Any, out: np.ndarray) -> None:
        """See `StreamCheck.decode`.

        Args:
            codec: numcodecs' decoder.
            data: the stored stream.
            out: the destination.
        """
        expected = out.nbytes
        declared = self.declared(data, len(data), expected)
        if declared is not None and declared != expected:
            raise size_mismatch(expected, declared, "declares")
        try:
            codec.decode(data, out=out)
        except Exception as err:
            raise ChunkBytesError(f"its {codec.codec_id} stream does not decode: {err}") from err


@dataclass(frozen=True)
class BoundedInflate:
    """Deflate streams, which declare no size that can be trusted: inflated by zlib
    itself, never producing more than one byte past the destination.

    Args:
        wbits: zlib's window bits for the container (`GZIP_WBITS` or `ZLIB_WBITS`).
    """

    wbits: int

    def decode(self, codec: Codec, data: Any, out: np.ndarray) -> None:
        """See `StreamCheck.decode` (`codec` is not used: zlib inflates the stream).

        Args:
            codec: numcodecs' decoder.
            data: the stored stream.
            out: the destination.
        """
        _inflate_exactly(memoryview(data), out.reshape(-1).view(np.uint8), self.wbits)


def blosc_declared(data: Any, length: int, expected: int) -> int:
    """See `DeclaredSizeReader`: a blosc header, whose stored size must be the stream's.

    Args:
        data: the stored stream.
        length: its length in bytes.
        expected: the bytes the chunk must decode to.
    """
    if length < _BLOSC_SIZES.size:
        raise ChunkBytesError(f"it is {length} bytes, too short for a blosc header")
    declared, stored = _BLOSC_SIZES.unpack_from(data)
    if stored != length:
        raise ChunkBytesError(
            f"its blosc header says {stored} stored bytes but {length} are stored "
            f"(truncated or extended)"
        )
    return int(declared)


def lz4_declared(data: Any, length: int, expected: int) -> int:
    """See `DeclaredSizeReader`: the size numcodecs' LZ4 writes before the stream.

    Args:
        data: the stored stream.
        length: its length in bytes.
        expected: the bytes the chunk must decode to.
    """
    if length < _LZ4_SIZE.size:
        raise ChunkBytesError(f"it is {length} bytes, too short for an lz4 header")
    return int(_LZ4_SIZE.unpack_from(data)[0])


def copy_exact(data: Any, out: np.ndarray) -> None:
    """Copy an uncompressed chunk's bytes into all of `out`, or raise `ChunkBytesError`
    if there are more or fewer.

    Args:
        data: the stored bytes, any checksum already checked and stripped.
        out: the destination (C-contiguous).
    """
    if len(data) != out.nbytes:
        raise size_mismatch(out.nbytes, len(data), "is")
    out.reshape(-1).view(np.uint8)[...] = np.frombuffer(data, dtype=np.uint8)


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
        if wbits == ZLIB_WBITS or not rest.strip(b"\0"):
            break
        if rest[:2] != _GZIP_MAGIC:
            raise ChunkBytesError(f"{len(rest)} bytes that are not a gzip member follow it")
    if produced != expected:
        raise size_mismatch(expected, produced)
    out[...] = np.frombuffer(parts[0] if len(parts) == 1 else b"".join(parts), dtype=np.uint8)
