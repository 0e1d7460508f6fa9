"""The segment one process is writing into a chunk cache folder, and the folder's budget.

Writing: entries are appended (one `pwritev` each) to a hidden file of this process's
own, `.{pid}-{random}.pending`, which it holds an exclusive `flock` on; sealing writes
the index after them and renames the file to its final `.seg` name once
(`cache_segment`), so no reader ever sees a segment that is not whole and no two writers
share a file. Until sealed, this process serves the entries from the file itself.

The budget: the bytes of the folder's files (sealed segments, and the space each pending
segment has reserved: it grows the file, sparse, a step at a time) may not pass
`max_bytes`. Growing takes the folder's one lock (`flock` on `budget.lock`), lists the
folder and grows the file only if the total stays within the budget, so processes
sharing the folder share it; sealing renames under it too (a listing between the old
name and the new would see neither); reads take no lock. A writer killed mid-segment leaves its
pending file, reserved space included, counted until a later writer sweeps it: a pending
file whose `flock` can be taken has no live writer (`sweep`).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from pathlib import Path

from insitubatch_nodes.io.cache.cache_entry import HEADER_NBYTES, header, verified_payload
from insitubatch_nodes.io.cache.cache_segment import (
    RECORD_NBYTES,
    SUFFIX,
    TRAILER_NBYTES,
    Record,
    index_bytes,
)

log = logging.getLogger(__name__)

PENDING_SUFFIX = ".pending"
LOCK = "budget.lock"
RESERVE_STEP = 8 << 20  # bytes a pending segment grows by at a time (fewer budget checks)
STALE_AFTER_S = 10.0  # a pending file this old whose lock is free has no writer


def folder_bytes(root: Path) -> int:
    """Bytes the budget counts in cache folder `root`: sealed and pending segments.

    Args:
        root: the folder's layout directory.
    """
    total = 0
    try:
        entries = list(os.scandir(root))
    except FileNotFoundError:
        return 0
    for entry in entries:
        if entry.name.endswith((SUFFIX, PENDING_SUFFIX)):
            try:
                total += entry.stat().st_size
            except FileNotFoundError:  # sealed (renamed) or swept meanwhile
                continue
    return total


class FolderBudget:
    """`max_bytes` of segments in `root`, shared by every process writing there.

    Args:
        root: the folder's layout directory (exists).
        max_bytes: the most bytes its segments may take.
    """

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._descriptor = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)

    def close(self) -> None:
        """Release the lock file."""
        os.close(self._descriptor)

    def grow(self, descriptor: int, current: int, wanted: int) -> bool:
        """Grow the pending file `descriptor` from `current` to `wanted` bytes if the folder
        stays within budget; whether it did.

        Args:
            descriptor: the pending segment, open for writing.
            current: its size now.
            wanted: the size asked for.
        """
        with self._lock:
            fcntl.flock(self._descriptor, fcntl.LOCK_EX)
            try:
                if folder_bytes(self.root) - current + wanted > self.max_bytes:
                    return False
                os.ftruncate(descriptor, wanted)
                return True
            finally:
                fcntl.flock(self._descriptor, fcntl.LOCK_UN)

    def rename(self, source: Path, target: Path) -> None:
        """Rename pending segment `source` to `target` under the folder's lock: a `grow`
        listing the folder meanwhile could see neither name and count the segment as free.

        Args:
            source: the pending segment.
            target: its sealed name.
        """
        with self._lock:
            fcntl.flock(self._descriptor, fcntl.LOCK_EX)
            try:
                os.rename(source, target)
            finally:
                fcntl.flock(self._descriptor, fcntl.LOCK_UN)

    def sweep(self) -> int:
        """Delete the pending files of writers that are gone (killed mid-segment); how many."""
        swept = 0
        now = time.time()
        for entry in list(os.scandir(self.root)):
            if not entry.name.endswith(PENDING_SUFFIX):
                continue
            try:
                if now - entry.stat().st_mtime < STALE_AFTER_S:
                    continue  # maybe made a moment ago, its writer about to lock it
                descriptor = os.open(entry.path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)  # its writer is alive
                continue
            try:
                if os.stat(entry.path).st_ino == os.fstat(descriptor).st_ino:
                    os.unlink(entry.path)
                    swept += 1
            except FileNotFoundError:
                pass
            finally:
                os.close(descriptor)
        if swept:
            log.info("chunk cache %s: removed %d abandoned pending segment(s)", self.root, swept)
        return swept


class SegmentWriter:
    """This process's pending segment in a cache folder (see the module). Thread-safe.

    Args:
        budget: the folder and its budget.
    """

    def __init__(self, budget: FolderBudget) -> None:
        self._budget = budget
        self._lock = threading.Lock()
        self._descriptor: int | None = None
        self._path: Path | None = None
        self._offset = 0
        self._reserved = 0
        self._started = 0.0
        self._records: list[Record] = []
        self._pending: dict[bytes, tuple[int, int]] = {}
        self.full = False

    @property
    def entry_bytes(self) -> int:
        """Bytes of entries written to the pending segment."""
        return self._offset

    @property
    def age_s(self) -> float:
        """Seconds since the pending segment's first entry (0 when it has none)."""
        return time.monotonic() - self._started if self._records else 0.0

    def holds(self, digest: bytes) -> bool:
        """Whether the pending segment has an entry for `digest`.

        Args:
            digest: the entry's key digest.
        """
        return digest in self._pending

    def append(self, digest: bytes, payload: bytes | memoryview) -> int:
        """Append entry `digest` holding `payload`; the bytes it takes in the segment (0 when
        the budget is spent, it is there already, or the write failed: a cache that cannot
        write never fails a read).

        Args:
            digest: the entry's key digest.
            payload: the chunk's stored bytes, as the store gave them.
        """
        head = header(digest, payload)  # the checksum, outside the lock
        taken = len(head) + len(payload) + RECORD_NBYTES
        with self._lock:
            if self.full or digest in self._pending:
                return 0
            try:
                if self._descriptor is None:
                    self._start()
                assert self._descriptor is not None
                sealed_size = (
                    self._offset + taken + len(self._records) * RECORD_NBYTES + TRAILER_NBYTES
                )
                if sealed_size > self._reserved and not self._reserve(sealed_size):
                    self.full = True
                    return 0
                os.pwritev(self._descriptor, [head, payload], self._offset)
            except OSError as err:
                log.warning(
                    "chunk cache %s: could not write an entry (%s); reading on without caching",
                    self._budget.root,
                    err,
                )
                self.full = True  # a full or failing disk: stop trying
                self._abandon()
                return 0
            self._records.append((digest, self._offset, len(payload)))
            self._pending[digest] = (self._offset, len(payload))
            self._offset += len(head) + len(payload)
            return taken

    def read(self, digest: bytes, limit: int, scratch: bytearray) -> memoryview | None:
        """The verified payload of pending entry `digest`, read into `scratch`, or None.

        Args:
            digest: the entry's key digest.
            limit: the most stored bytes a valid chunk of its array takes.
            scratch: a buffer of at least `HEADER_NBYTES + limit` bytes.
        """
        with self._lock:  # the file stays open (not sealed) while it is read
            found = self._pending.get(digest)
            if found is None or self._descriptor is None or found[1] > limit:
                return None
            offset, length = found
            view = memoryview(scratch)[: HEADER_NBYTES + length]
            got = os.preadv(self._descriptor, [view], offset)
        return verified_payload(view[:got], digest, limit)

    def seal(self) -> Path | None:
        """Write the pending segment's index, rename it into place and start afresh; the
        sealed segment's path, or None when there was nothing to seal (or it failed)."""
        with self._lock:
            if self._descriptor is None:
                return None
            if not self._records:
                self._abandon()
                return None
            assert self._path is not None
            final = self._path.with_name(
                f"{time.time_ns():020d}-{os.getpid()}-{os.urandom(4).hex()}{SUFFIX}"
            )
            try:
                tail = index_bytes(self._records, self._offset)
                os.pwrite(self._descriptor, tail, self._offset)
                os.ftruncate(self._descriptor, self._offset + len(tail))
                self._budget.rename(self._path, final)  # whole: the segment's one rename
            except OSError as err:
                log.warning("chunk cache %s: could not seal a segment (%s)", final.parent, err)
                self._abandon()
                return None
            self._close()
            return final

    def _start(self) -> None:
        path = self._budget.root / f".{os.getpid()}-{os.urandom(6).hex()}{PENDING_SUFFIX}"
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        fcntl.flock(descriptor, fcntl.LOCK_EX)  # held until sealed: `sweep` leaves it alone
        self._descriptor, self._path = descriptor, path
        self._offset = self._reserved = 0
        self._started = time.monotonic()

    def _reserve(self, needed: int) -> bool:
        assert self._descriptor is not None
        step = max(min(RESERVE_STEP, self._budget.max_bytes // 16), 0)
        for wanted in (needed + step, needed, needed):
            if self._budget.grow(self._descriptor, self._reserved, wanted):
                self._reserved = wanted
                return True
            if wanted == needed and not self._budget.sweep():
                break  # full, and no killed writer's space to take back
        return False

    def _abandon(self) -> None:
        if self._path is not None:
            self._path.unlink(missing_ok=True)
        self._close()

    def _close(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # releases the flock
        self._descriptor = self._path = None
        self._offset = self._reserved = 0
        self._records = []
        self._pending = {}
