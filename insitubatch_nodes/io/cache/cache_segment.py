"""A chunk cache segment file: many entries packed one after another, then their index.

A segment is written by one process under a hidden temporary name and renamed into place
once, when whole (`segment_writer`), so packing thousands of small entries costs one
rename, not one per entry. Its layout:

    entry, entry, ...   each a `cache_entry` header and the chunk's stored bytes
    index               one record per entry: its key digest, offset and payload length
    trailer             magic, format, checksum kind, the index's offset, entry count and
                        checksum

A sealed segment never changes; readers map it once (`Segment.open`) and look entries up
in memory. The index is trusted only whole (its checksum, every record inside the entry
region); each entry is still verified on every read (`cache_entry.verified_payload`), so
bytes damaged on disk after the segment was sealed are never served.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from insitubatch_nodes.io.cache.cache_entry import (
    HEADER_NBYTES,
    checksum,
    preferred_kind,
    verified_payload,
)

SUFFIX = ".seg"
MAGIC = b"IBCS"
FORMAT = 1
RECORD = struct.Struct("<32sQQ")  # key digest, entry offset, payload length
TRAILER = struct.Struct("<4sBBHQQQ")  # magic, format, checksum kind, 0, index offset, count, sum
RECORD_NBYTES = RECORD.size
TRAILER_NBYTES = TRAILER.size

Record = tuple[bytes, int, int]  # (key digest, entry offset, payload length)


def index_bytes(records: list[Record], index_offset: int) -> bytes:
    """The index and trailer that seal a segment whose entries end at `index_offset`.

    Args:
        records: every entry written, in order.
        index_offset: where the index starts (the end of the last entry).
    """
    index = b"".join(RECORD.pack(*record) for record in records)
    kind = preferred_kind()
    value = checksum(kind, index)
    assert value is not None
    return index + TRAILER.pack(MAGIC, FORMAT, kind, 0, index_offset, len(records), value)


def parse_index(view: memoryview) -> list[Record] | None:
    """The records of a whole segment's bytes `view`, or None if its trailer or index is
    damaged, foreign, or points outside the entries.

    Args:
        view: the segment file's bytes, all of them.
    """
    size = len(view)
    if size < TRAILER_NBYTES:
        return None
    trailer = TRAILER.unpack_from(view, size - TRAILER_NBYTES)
    magic, fmt, kind, _, index_offset, count, value = trailer
    if magic != MAGIC or fmt != FORMAT:
        return None
    if index_offset + count * RECORD_NBYTES + TRAILER_NBYTES != size:
        return None
    index = view[index_offset : size - TRAILER_NBYTES]
    if checksum(kind, index) != value:
        return None
    records = [RECORD.unpack_from(index, i * RECORD_NBYTES) for i in range(count)]
    for _, offset, length in records:
        if offset + HEADER_NBYTES + length > index_offset:
            return None
    return records


@dataclass(eq=False)
class Segment:
    """A sealed segment, mapped read-only once for the life of the cache that opened it.

    Args:
        path: the segment file.
        view: its bytes, mapped.
        records: its index.
    """

    path: Path
    view: memoryview
    records: list[Record]

    @classmethod
    def open(cls, path: Path) -> Segment | None:
        """The segment at `path`, or None when it is gone or damaged (its index unreadable).

        Args:
            path: a sealed segment file.
        """
        try:
            descriptor = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(descriptor).st_size
            if size == 0:
                return None
            mapped = mmap.mmap(descriptor, size, access=mmap.ACCESS_READ)
        finally:
            os.close(descriptor)
        view = memoryview(mapped)
        records = parse_index(view)
        if records is None:
            return None
        return cls(path, view, records)

    def payload(self, offset: int, length: int, digest: bytes, limit: int) -> memoryview | None:
        """The verified payload of the entry at `offset`, a view of the mapping (no copy),
        or None when it is damaged.

        Args:
            offset: the entry's offset (its index record's).
            length: its payload length (its index record's).
            digest: the key digest it must have been written under.
            limit: the most stored bytes a valid chunk of its array takes.
        """
        end = offset + HEADER_NBYTES + length
        if end > len(self.view):
            return None
        return verified_payload(self.view[offset:end], digest, limit)
