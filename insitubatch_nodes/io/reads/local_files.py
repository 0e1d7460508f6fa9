"""Chunk files of local stores, read with plain syscalls in the decode threads.

A local store has no latency to hide, so its reads skip the event loop and zarr's store
layer: the cost per chunk is a few syscalls, and the page faults of fresh memory, which a
reused scratch buffer avoids.
"""

from __future__ import annotations

import os

from insitubatch_nodes.io.reads.chunk_errors import ChunkBytesError


def read_file(
    path: str, scratch: bytearray | None = None, *, limit: int | None = None
) -> bytes | memoryview | None:
    """A local chunk file's bytes, or `None` if it was never written (the fill value).

    With `scratch`, a file that fits is read into it (a view of it comes back, valid until
    the next read into the same scratch): one syscall fewer than sizing the file first,
    and no fresh allocation, whose first-touch page faults cost as much as the copy. A
    file larger than `limit` bytes (more than any valid chunk takes) is refused unread, so
    a hostile file cannot take memory beyond the budget.

    Args:
        path: the chunk file's path.
        scratch: a reusable buffer to read into, or `None` to allocate.
        limit: the most bytes a valid chunk file of the array holds, or `None`.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        if scratch is not None:
            got = os.readv(descriptor, [scratch])
            if got < len(scratch):
                return memoryview(scratch)[:got]
            os.lseek(descriptor, 0, os.SEEK_SET)  # larger than the scratch: read it whole
        size = os.fstat(descriptor).st_size
        if limit is not None and size > limit:
            raise ChunkBytesError(
                f"its file is {size} bytes, more than any valid chunk of its array takes ({limit})",
                actual_nbytes=size,
            )
        parts = [os.read(descriptor, size)]
        got = len(parts[0])
        while got < size and parts[-1]:  # a short read: very large files
            parts.append(os.read(descriptor, size - got))
            got += len(parts[-1])
        return parts[0] if len(parts) == 1 else b"".join(parts)
    finally:
        os.close(descriptor)


def open_or_none(path: str) -> int | None:
    """A descriptor of the file at `path`, or `None` if it was never written.

    Args:
        path: the file's path.
    """
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
