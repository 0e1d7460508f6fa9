"""One chunk cache entry on disk: a fixed header, then the chunk's stored bytes (packed
with others into a segment file, `cache_segment`).

An entry is trusted only after it proves itself: the header names the format, the
checksum kind, the payload's length and checksum, and the digest of the key it was
written under, so an entry that was cut short, overwritten, flipped on disk or moved to
another entry's place reads as damaged (`None`), never as a chunk. xxh3 (about 20 GB/s
on one core here) is the checksum when the `xxhash` package is installed, crc32c
(google-crc32c, a dependency already, about 12 GB/s) otherwise; each entry says which
it was written with, so caches written by either are read by both.
"""

from __future__ import annotations

import struct

import google_crc32c

try:
    import xxhash
except ImportError:  # pragma: no cover - xxhash is a dependency; crc32c is the fallback
    xxhash = None

MAGIC = b"IBCE"
FORMAT = 1
XXH3_64 = 1
CRC32C = 2
HEADER = struct.Struct("<4sBBHQQ32s")  # magic, format, checksum kind, 0, length, sum, digest
HEADER_NBYTES = HEADER.size
DIGEST_NBYTES = 32


def checksum(kind: int, payload: bytes | memoryview) -> int | None:
    """The checksum of `payload` of `kind`, or None when this process cannot compute it.

    Args:
        kind: `XXH3_64` or `CRC32C`.
        payload: the bytes.
    """
    if kind == XXH3_64:
        return None if xxhash is None else xxhash.xxh3_64_intdigest(payload)
    if kind == CRC32C:
        return google_crc32c.value(bytes(payload) if isinstance(payload, memoryview) else payload)
    return None


def preferred_kind() -> int:
    """The checksum kind this process writes: xxh3 when it can, crc32c otherwise."""
    return XXH3_64 if xxhash is not None else CRC32C


def header(digest: bytes, payload: bytes | memoryview) -> bytes:
    """The header of an entry holding `payload` under key `digest`.

    Args:
        digest: the entry's key digest (`DIGEST_NBYTES` bytes).
        payload: the chunk's stored bytes.
    """
    kind = preferred_kind()
    value = checksum(kind, payload)
    assert value is not None
    return HEADER.pack(MAGIC, FORMAT, kind, 0, len(payload), value, digest)


def verified_payload(entry: memoryview, digest: bytes, limit: int) -> memoryview | None:
    """The payload of a whole entry file's bytes `entry`, or None if anything about it is
    wrong: a foreign or damaged header, another key's digest, a length that is not the
    file's or is more than a valid chunk takes (`limit`), a checksum that does not match.

    Args:
        entry: the entry file's bytes, all of them.
        digest: the key digest the entry must have been written under.
        limit: the most stored bytes a valid chunk of its array takes.
    """
    if len(entry) < HEADER_NBYTES:
        return None
    magic, fmt, kind, _, length, value, written_for = HEADER.unpack_from(entry)
    if magic != MAGIC or fmt != FORMAT or written_for != digest:
        return None
    if length > limit or length != len(entry) - HEADER_NBYTES:
        return None
    payload = entry[HEADER_NBYTES:]
    if checksum(kind, payload) != value:
        return None
    return payload
