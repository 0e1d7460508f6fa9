"""A folder of verified chunk cache entries, shared by every process that opens it.

What it keeps: each chunk's stored (compressed) bytes as the store gave them, under the
digest of its key (`entry_digest`: the store's identity, the array's metadata, the chunk
and the object's version, hashed, so no part of a URL or a credential is on disk),
packed into segment files (`cache_segment`): each process appends the entries it admits
to a pending segment of its own and renames it into place once, sealed
(`segment_writer`); a loader's admissions are written by a thread of their own, off the
decode threads (`cache_writes`). A reader sees whole segments or none; two writers never share a
file, so of two writers of one entry each writes its own whole copy, and a reader takes
either. Opening the folder maps every sealed segment once and reads their indexes into
memory; later lookups are a dictionary lookup and a check of the mapped bytes, with no
file opened per chunk. Segments sealed by other processes are picked up by `refresh`.

Every entry is verified when read (`cache_entry`); a damaged one is forgotten (this
process reads the chunk from the store and admits it again, into a newer segment that
later readers prefer) and a segment whose index is damaged is deleted (unless the cache
is read-only). A mapped segment must not be truncated while in use: delete the folder to
start over, never cut its files.

The budget: entries are admitted until the segments on disk would pass `max_bytes`, and
kept (no eviction). Every reuse of a chunk crosses an epoch boundary, so for a cache of
C bytes and a split of S no policy hits more than C/S of an epoch's chunks, and LRU,
evicting each chunk just before its next use, would hit fewer. Processes sharing the
folder share the budget (`segment_writer.FolderBudget`: the only lock, taken by writers
a few MiB at a time; reads take none).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from insitubatch_nodes.core.memory_bound import CACHE_QUEUE_BYTES
from insitubatch_nodes.core.settings import as_bool, as_int
from insitubatch_nodes.io.cache.cache_entry import DIGEST_NBYTES, HEADER_NBYTES
from insitubatch_nodes.io.cache.cache_segment import SUFFIX, Segment
from insitubatch_nodes.io.cache.cache_writes import QueuedWrites, Write, Written
from insitubatch_nodes.io.cache.segment_writer import FolderBudget, SegmentWriter

log = logging.getLogger(__name__)

LAYOUT = "insitubatch-chunks-v2"  # the folder's layout; a new layout gets a new folder
SEGMENT_BYTES = 64 << 20  # a pending segment this large is sealed at the next block's end
SEAL_AFTER_S = 2.0  # and one this old: other processes see entries within seconds
REFRESH_S = 1.0  # how often, at most, the folder is listed for other processes' segments


def entry_digest(*parts: str) -> bytes:
    """The digest naming an entry: of its key's parts, in order (see the module).

    Args:
        *parts: the key's parts; none may contain a NUL character.
    """
    return key_hasher(*parts).digest()


def key_hasher(*parts: str) -> Any:
    """A hash of an entry key's first `parts`, to `.copy()` and finish with the rest: the
    parts every chunk of an array shares (its store, path and metadata, a few KB) are
    hashed once, not per chunk; `entry_digest(*parts, *rest)` equals the finished copy's.

    Args:
        *parts: the key's first parts; none may contain a NUL character.
    """
    digest = hashlib.sha256(LAYOUT.encode())
    for part in parts:
        digest.update(b"\0")
        digest.update(part.encode())
    return digest


@dataclass(frozen=True)
class CacheSpec:
    """Where a loader caches stored chunks, and how much.

    Args:
        folder: a local directory (made if missing; on fast local disk, e.g. NVMe).
        max_bytes: the most bytes of entries kept there, shared by every process using the
            folder.
        read_only: use a cache prepared beforehand (`insitubatch cache`) and never write.
    """

    folder: Path
    max_bytes: int
    read_only: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "folder", Path(self.folder).expanduser())
        object.__setattr__(self, "max_bytes", as_int("cache max_bytes", self.max_bytes, minimum=0))
        object.__setattr__(self, "read_only", as_bool("cache read_only", self.read_only))

    @classmethod
    def from_user(cls, value: Any) -> CacheSpec | None:
        """`build_loader(cache=...)` as a spec: None (no cache), a `CacheSpec`, or a dict
        with `folder`, `max_bytes` and optionally `read_only`.

        Args:
            value: what the user gave.
        """
        if value is None or isinstance(value, CacheSpec):
            return value
        fields = {"folder", "max_bytes", "read_only"}
        if isinstance(value, dict) and {"folder", "max_bytes"} <= set(value) <= fields:
            return cls(value["folder"], value["max_bytes"], value.get("read_only", False))
        raise TypeError(
            "cache= takes a CacheSpec(folder, max_bytes, read_only=False) or a dict "
            "{'folder': '/local/disk/cache', 'max_bytes': 200 * 2**30}; got "
            f"{type(value).__name__}"
        )


class ChunkCache:
    """The cache folder of `spec`, opened by this process (see the module).

    Thread-safe: lookups run in any decode thread at once, under no lock; admissions
    serialise on this process's pending segment only.

    Args:
        spec: the folder, the budget and whether to write.
        queue_bytes: the most stored bytes queued for the writing thread at once (the
            loader's memory plan gives the share, `MemoryPlan.cache_queue_bytes`).
    """

    def __init__(self, spec: CacheSpec, queue_bytes: int = CACHE_QUEUE_BYTES) -> None:
        self.spec = spec
        self.root = spec.folder / LAYOUT
        self._index: dict[bytes, tuple[Segment, int, int]] = {}
        self._mapped: set[str] = set()
        self._refreshing = threading.Lock()
        self._refreshed_at = float("-inf")
        self._writer: SegmentWriter | None = None
        self._queued: QueuedWrites | None = None
        if not spec.read_only:
            self.root.mkdir(parents=True, exist_ok=True)
            budget = FolderBudget(self.root, spec.max_bytes)
            budget.sweep()
            self._writer = SegmentWriter(budget)
            # the thread's writes refer to the writer and the index, not to the cache,
            # which the finalizer below must see collected
            self._queued = QueuedWrites(_admitting(self._writer, self._index), queue_bytes)
            weakref.finalize(self, _seal_and_close, self._queued, self._writer, budget)
        self.refresh(force=True)

    def due(self, idle: bool) -> bool:
        """Whether this process's pending segment is to be sealed now: it holds entries and
        no block is being read (`idle`: the end of an epoch, or a pause), or it is large or
        old (see the module).

        Args:
            idle: whether no block's chunks are being fetched now.
        """
        writer = self._writer
        if writer is None:
            return False
        if idle and self._queued is not None and self._queued.pending:
            return True
        if not writer.age_s:
            return False
        return idle or writer.entry_bytes >= SEGMENT_BYTES or writer.age_s >= SEAL_AFTER_S

    def seal(self, wait: bool = True) -> None:
        """Seal this process's pending segment (if it holds entries) and serve it mapped.
        Blocks (on the queue's writes, the index's write, the folder's lock): call it off
        the event loop.

        Args:
            wait: first wait for the entries `admit_later` queued to be written, so that the
                segment holds them all (else they go into the next one).
        """
        if wait and self._queued is not None:
            self._queued.drain()
        if self._writer is not None:
            sealed = self._writer.seal()
            if sealed is not None:
                with self._refreshing:  # a `refresh` meanwhile may list it: mapped once
                    if sealed.name not in self._mapped:
                        self._map(sealed)

    def refresh(self, force: bool = False) -> None:
        """Map the segments sealed since the last look (by any process), at most once per
        `REFRESH_S` unless `force`d.

        Args:
            force: list the folder now.
        """
        now = time.monotonic()
        if not force and now - self._refreshed_at < REFRESH_S:
            return
        if not self._refreshing.acquire(blocking=force):
            return  # another thread is at it
        try:
            self._refreshed_at = now
            try:
                names = sorted(
                    entry.name for entry in os.scandir(self.root) if entry.name.endswith(SUFFIX)
                )
            except FileNotFoundError:
                return
            for name in names:  # oldest first (names start with the time sealed): newer win
                if name not in self._mapped:
                    self._map(self.root / name)
        finally:
            self._refreshing.release()

    def lookup(self, digest: bytes, limit: int, scratch: bytearray) -> memoryview | None:
        """The verified stored bytes of entry `digest`, or None when there is none or it is
        damaged (then forgotten). A view of the segment's mapping, or of `scratch` for an
        entry not sealed yet: valid until `scratch`'s next use.

        Args:
            digest: the entry's key digest.
            limit: the most stored bytes a valid chunk of its array takes.
            scratch: a buffer of at least `scratch_nbytes(limit)` bytes.
        """
        assert len(digest) == DIGEST_NBYTES and len(scratch) >= scratch_nbytes(limit)
        found = self._index.get(digest)
        if found is None:
            return None if self._writer is None else self._writer.read(digest, limit, scratch)
        segment, offset, length = found
        payload = segment.payload(offset, length, digest, limit)
        if payload is None:
            if self._index.get(digest) is found:
                self._index.pop(digest, None)  # another thread may have dropped it too
            log.warning(
                "chunk cache %s: a damaged entry in %s was not used; its chunk is read from "
                "the store%s",
                self.root,
                segment.path.name,
                "" if self._writer is None else " and cached again",
            )
        return payload

    def holds(self, digest: bytes) -> bool:
        """Whether entry `digest` is in the cache (not yet verified: `lookup` does that).

        Args:
            digest: the entry's key digest.
        """
        return digest in self._index or (self._writer is not None and self._writer.holds(digest))

    def admit(self, digest: bytes, payload: bytes | memoryview) -> int:
        """Write entry `digest` holding `payload` if the budget has room; the bytes it took
        on disk (0 when read-only, full, already there, or the write failed: a cache that
        cannot write never fails a read).

        Args:
            digest: the entry's key digest.
            payload: the chunk's stored bytes, as the store gave them.
        """
        if self._writer is None:
            return 0
        return _admitting(self._writer, self._index)(digest, payload)

    def admit_later(self, digest: bytes, payload: bytes | memoryview, written: Written) -> None:
        """`admit`, on the cache's writing thread (`cache_writes`): `payload` is kept, not
        copied, until written, so it must be a buffer nobody reuses (the store's reply, not
        a scratch); until then a lookup misses it.

        Args:
            digest: the entry's key digest.
            payload: the chunk's stored bytes, as the store gave them; must not change.
            written: told the bytes the entry took on disk once written (0: it was not).
        """
        if self._queued is None or self._writer is None or self._writer.full:
            return
        if digest not in self._index:
            self._queued.submit(digest, payload, written)

    def _map(self, path: Path) -> None:
        self._mapped.add(path.name)
        try:
            segment = Segment.open(path)
        except OSError as err:  # out of descriptors or mappings, say: serve it from the store
            log.warning("chunk cache %s: cannot map %s (%s)", self.root, path.name, err)
            return
        if segment is None:
            if path.exists():
                log.warning("chunk cache %s: segment %s is damaged", self.root, path.name)
                if self._writer is not None:
                    path.unlink(missing_ok=True)
            return
        for digest, offset, length in segment.records:
            self._index[digest] = (segment, offset, length)


def _admitting(writer: SegmentWriter, index: dict[bytes, Any]) -> Write:
    """`ChunkCache.admit` over its `writer` and `index` alone."""

    def admit(digest: bytes, payload: bytes | memoryview) -> int:
        if writer.full or digest in index:
            return 0
        return writer.append(digest, payload)

    return admit


def _seal_and_close(queued: QueuedWrites, writer: SegmentWriter, budget: FolderBudget) -> None:
    """When a cache is collected (or the process exits): write what is queued, seal what it
    wrote, free the lock."""
    queued.drain()
    writer.seal()
    budget.close()


def scratch_nbytes(limit: int) -> int:
    """Bytes of a scratch buffer `ChunkCache.lookup` reads an entry of at most `limit`
    stored bytes into (one more, so that an overlong file shows).

    Args:
        limit: the most stored bytes a valid chunk takes.
    """
    return HEADER_NBYTES + limit + 1
