"""A folder of verified chunk cache entries, shared by every process that opens it.

What it keeps: each chunk's stored (compressed) bytes as the store gave them, one file
per entry named by the digest of its key (`entry_digest`: the store's identity, the
array's metadata, the chunk and the object's version, hashed, so no part of a URL or a
credential is in any path or file), written whole to a temporary name and linked into
place: a reader sees a whole entry or none, and of two writers of one entry the first
one's whole copy stays (a link never replaces), counted once in the ledger. Every
entry is verified when read (`cache_entry`); a damaged one is deleted (unless the
cache is read-only) and read from the store again.

The budget: entries are admitted until the bytes on disk would pass `max_bytes`, and
kept (no eviction). Every reuse of a chunk crosses an epoch boundary, so for a cache of
C bytes and a split of S no policy hits more than C/S of an epoch's chunks, and LRU,
evicting each chunk just before its next use, would hit fewer. The bytes admitted are
counted in one small ledger file that every writer updates under `flock` (the only
lock, and writers only: reads take none), so processes sharing the folder share the
budget. A writer killed mid-entry leaves a temporary file the ledger still counts: the
ledger errs towards full, never past the budget. Delete the folder to start over.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from insitubatch_nodes.core.settings import as_bool, as_int
from insitubatch_nodes.io.cache_entry import DIGEST_NBYTES, HEADER_NBYTES, header, verified_payload

log = logging.getLogger(__name__)

LAYOUT = "insitubatch-chunks-v1"  # the folder's layout; a new layout gets a new folder
LEDGER = "admitted_bytes"


def entry_digest(*parts: str) -> bytes:
    """The digest naming an entry: of its key's parts, in order (see the module).

    Args:
        *parts: the key's parts; none may contain a NUL character.
    """
    digest = hashlib.sha256(LAYOUT.encode())
    for part in parts:
        digest.update(b"\0")
        digest.update(part.encode())
    return digest.digest()


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

    Thread-safe: lookups run in any decode thread at once; admissions serialise on the
    ledger only.

    Args:
        spec: the folder, the budget and whether to write.
    """

    def __init__(self, spec: CacheSpec) -> None:
        self.spec = spec
        self.root = spec.folder / LAYOUT
        self._lock = threading.Lock()
        self._full = False
        self._ledger: int | None = None
        if not spec.read_only:
            self.root.mkdir(parents=True, exist_ok=True)
            self._ledger = os.open(self.root / LEDGER, os.O_RDWR | os.O_CREAT, 0o644)
            weakref.finalize(self, os.close, self._ledger)
            with self._locked_ledger() as used:
                if used is None:  # a new folder, or a lost ledger: count what is there
                    self._write_ledger(self._count_entries())

    def path(self, digest: bytes) -> Path:
        """Where the entry of `digest` lives.

        Args:
            digest: an `entry_digest`.
        """
        name = digest.hex()
        return self.root / name[:2] / name

    def lookup(self, digest: bytes, limit: int, scratch: bytearray) -> memoryview | None:
        """The verified stored bytes of entry `digest` (a view of `scratch`, valid until its
        next use), or None when there is none or it is damaged (then dropped).

        Args:
            digest: the entry's key digest.
            limit: the most stored bytes a valid chunk of its array takes.
            scratch: a buffer of at least `scratch_nbytes(limit)` bytes to read into.
        """
        assert len(digest) == DIGEST_NBYTES and len(scratch) >= scratch_nbytes(limit)
        path = self.path(digest)
        try:
            descriptor = os.open(path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            got = os.readv(descriptor, [scratch])
        finally:
            os.close(descriptor)
        entry = memoryview(scratch)[:got]
        payload = None if got == len(scratch) else verified_payload(entry, digest, limit)
        if payload is None:
            self.drop(path)
        return payload

    def admit(self, digest: bytes, payload: bytes | memoryview) -> int:
        """Write entry `digest` holding `payload` if the budget has room; the bytes it took
        on disk (0 when read-only, full, already there, or the write failed: a cache that
        cannot write never fails a read).

        Args:
            digest: the entry's key digest.
            payload: the chunk's stored bytes, as the store gave them.
        """
        if self._ledger is None or self._full:
            return 0
        path = self.path(digest)
        if path.exists():
            return 0
        nbytes = HEADER_NBYTES + len(payload)
        if not self._reserve(nbytes):
            return 0
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
        try:
            path.parent.mkdir(exist_ok=True)
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.writev(descriptor, [header(digest, payload), payload])
            finally:
                os.close(descriptor)
            try:
                os.link(temporary, path)  # never replaces: a second writer's bytes are not
            except FileExistsError:  # counted twice; the entry there is as good as ours
                self._reserve(-nbytes)
                nbytes = 0
            finally:
                temporary.unlink(missing_ok=True)
        except OSError as err:
            temporary.unlink(missing_ok=True)
            self._reserve(-nbytes)
            log.warning("chunk cache %s: could not write an entry (%s); reading on", self.root, err)
            self._full = True  # a full or failing disk: stop trying
            return 0
        return nbytes

    def drop(self, path: Path) -> bool:
        """Delete a damaged entry (not in a read-only cache); whether this call deleted it.

        Args:
            path: the entry's path.
        """
        if self._ledger is None:
            return False
        try:
            nbytes = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return False  # another reader dropped it first
        self._reserve(-nbytes)
        log.warning("chunk cache %s: dropped a damaged entry %s", self.root, path.name)
        return True

    @property
    def admitted_bytes(self) -> int:
        """Bytes the ledger counts (entries, plus temporary files of interrupted writes)."""
        if self._ledger is None:
            return self._count_entries()
        with self._locked_ledger() as used:
            return used or 0

    def _reserve(self, nbytes: int) -> bool:
        with self._locked_ledger() as used:
            used = self._count_entries() if used is None else used
            if nbytes > 0 and used + nbytes > self.spec.max_bytes:
                self._full = True
                return False
            self._write_ledger(max(0, used + nbytes))
            return True

    def _locked_ledger(self) -> _Ledger:
        assert self._ledger is not None
        return _Ledger(self._ledger, self._lock)

    def _write_ledger(self, used: int) -> None:
        assert self._ledger is not None
        os.pwrite(self._ledger, used.to_bytes(8, "little"), 0)

    def _count_entries(self) -> int:
        if not self.root.is_dir():
            return 0
        total = 0
        for folder in os.scandir(self.root):
            if folder.is_dir():
                total += sum(entry.stat().st_size for entry in os.scandir(folder.path))
        return total


def scratch_nbytes(limit: int) -> int:
    """Bytes of a scratch buffer `ChunkCache.lookup` reads an entry of at most `limit`
    stored bytes into (one more, so that an overlong file shows).

    Args:
        limit: the most stored bytes a valid chunk takes.
    """
    return HEADER_NBYTES + limit + 1


class _Ledger:
    """The ledger held: this process's lock, then the folder's `flock`; yields the bytes
    it counts, or None when it holds no valid count."""

    def __init__(self, descriptor: int, lock: threading.Lock) -> None:
        self._descriptor = descriptor
        self._lock = lock

    def __enter__(self) -> int | None:
        self._lock.acquire()
        try:
            fcntl.flock(self._descriptor, fcntl.LOCK_EX)
        except BaseException:
            self._lock.release()
            raise
        raw = os.pread(self._descriptor, 9, 0)
        return int.from_bytes(raw, "little") if len(raw) == 8 else None

    def __exit__(self, *exc: object) -> None:
        try:
            fcntl.flock(self._descriptor, fcntl.LOCK_UN)
        finally:
            self._lock.release()
