"""Which store a cache entry came from, and which version of its object.

A cached chunk may be served only while the object it was read from is unchanged: an
array rewritten in place with the same layout keeps its metadata and keys, so only the
objects' versions tell the old bytes from the new. Each kind of store says them as
cheaply as it can:

- local directories: the chunk file's size, modification time (ns) and inode, one
  `stat` per chunk in the decode threads (about 2 us);
- object stores (obstore: S3, GCS, Azure, also its memory store): each array's objects
  are listed once per epoch (one request per 1,000 objects; ETag, last-modified, size);
  an object not listed, or an array whose listing failed, is not cached that epoch;
- an Icechunk snapshot: immutable, so its id in the store's identity is the version (the
  same snapshot read by branch, tag or id shares its entries); a writable session's store
  is not cached (it reads its own uncommitted writes under its base snapshot's id);
- zarr's own memory store is not cached: it is named by its dict's `id`, which a new
  store reuses once the old one is freed, so no identity tells two of them apart (and a
  disk cache of memory saves nothing);
- any other store (a wrapper store, say) gives no versions: its entries are keyed by its
  identity and the array's metadata only, and rewriting its chunks in place with the
  same metadata needs the cache folder cleared (`versioned` says so, and the loader logs
  it).

The identity is the store's URL with credentials redacted (`ZarrSource.where`), plus,
for a process's own memory store, a per-process nonce (another process's memory store
of the same name holds other data).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Protocol

import obstore
import obstore.store
from zarr.abc.store import Store
from zarr.storage import MemoryStore, ObjectStore

from insitubatch_nodes.io.reads.retry import RetryPolicy
from insitubatch_nodes.io.stores.icechunk_store import is_writable_icechunk, snapshot_id_of
from insitubatch_nodes.io.stores.open_store import local_root
from insitubatch_nodes.io.stores.redact import redact

log = logging.getLogger(__name__)

PROCESS_NONCE = os.urandom(8).hex()  # this process's memory stores are its own
LIST_PAGE = 1000


class ObjectVersions(Protocol):
    """Versions of a store's objects, as cache keys use them.

    Args:
        identity: the store, as a cache key names it (no credentials).
        versioned: whether `version` tells a rewritten object from the old one.
        blocking: whether `version` does IO (then it is asked off the event loop).
    """

    identity: str
    versioned: bool
    blocking: bool

    async def prepare(self, prefix: str) -> None:
        """Learn the versions of the objects under `prefix` (on the event loop), before
        `version` is asked about them.

        Args:
            prefix: an array's key prefix.
        """
        ...

    def version(self, key: str) -> str | None:
        """The version of object `key`, or None when there is none to cache against (no
        such object, or its version is unknown). May block briefly (a `stat`).

        Args:
            key: the stored object's key.
        """
        ...


class FileVersions:
    """Versions of a local directory's files (see the module).

    Args:
        root: the directory.
    """

    versioned = True
    blocking = True

    def __init__(self, root: str) -> None:
        self.identity = f"file://{root}"
        self._root = root

    async def prepare(self, prefix: str) -> None:
        """Nothing to learn ahead: each file is asked about as it is read.

        Args:
            prefix: an array's key prefix.
        """

    def version(self, key: str) -> str | None:
        """See `ObjectVersions.version`.

        Args:
            key: the stored object's key.
        """
        try:
            found = os.stat(f"{self._root}/{key}")
        except (FileNotFoundError, NotADirectoryError):
            return None
        return f"{found.st_size}.{found.st_mtime_ns}.{found.st_ino}"


class ListedVersions:
    """Versions of an object store's objects, from one listing per array prefix.

    Args:
        client: the obstore store.
        identity: the store as a cache key names it.
        retry: how a failed listing is tried again.
        on_retry: counts a retry.
    """

    versioned = True
    blocking = False

    def __init__(
        self,
        client: obstore.store.ObjectStore,
        identity: str,
        retry: RetryPolicy,
        on_retry: Callable[[], None],
    ) -> None:
        self.identity = identity
        self._client = client
        self._retry = retry
        self._on_retry = on_retry
        self._versions: dict[str, str] = {}
        self._listed: dict[str, asyncio.Lock] = {}
        self._done: set[str] = set()

    async def prepare(self, prefix: str) -> None:
        """See `ObjectVersions.prepare`: one listing per prefix, however many ask.

        Args:
            prefix: an array's key prefix.
        """
        lock = self._listed.setdefault(prefix, asyncio.Lock())
        async with lock:
            if prefix in self._done:
                return
            try:
                listed = await self._retry.call(lambda: self._list(prefix), prefix, self._on_retry)
            except Exception as err:
                cause = err.__cause__ or err
                log.warning(
                    "chunk cache: listing %r failed (%s: %s); its chunks are read from the "
                    "store and not cached this epoch",
                    prefix,
                    type(cause).__name__,
                    redact(str(cause)),  # obstore repeats the request's URL, userinfo and all
                )
                listed = {}
            self._versions.update(listed)
            self._done.add(prefix)

    async def _list(self, prefix: str) -> dict[str, str]:
        found: dict[str, str] = {}
        async for page in obstore.list(self._client, prefix, chunk_size=LIST_PAGE):
            for meta in page:
                modified = meta["last_modified"]
                found[meta["path"]] = (
                    f"{meta.get('e_tag') or ''}|{modified.isoformat() if modified else ''}|"
                    f"{meta['size']}|{meta.get('version') or ''}"
                )
        return found

    def version(self, key: str) -> str | None:
        """See `ObjectVersions.version`.

        Args:
            key: the stored object's key.
        """
        return self._versions.get(key)


class FixedVersions:
    """One version for every object: an immutable snapshot's, or none known.

    Args:
        identity: the store as a cache key names it.
        versioned: whether the identity pins the objects' contents (a snapshot).
    """

    blocking = False

    def __init__(self, identity: str, versioned: bool) -> None:
        self.identity = identity
        self.versioned = versioned

    async def prepare(self, prefix: str) -> None:
        """Nothing to learn.

        Args:
            prefix: an array's key prefix.
        """

    def version(self, key: str) -> str | None:
        """See `ObjectVersions.version`.

        Args:
            key: the stored object's key.
        """
        return ""


class NoVersions:
    """No version for any object: nothing of the store is cached.

    Args:
        identity: the store as messages name it.
    """

    versioned = True  # nothing cached, so nothing served stale
    blocking = False

    def __init__(self, identity: str) -> None:
        self.identity = identity

    async def prepare(self, prefix: str) -> None:
        """Nothing to learn.

        Args:
            prefix: an array's key prefix.
        """

    def version(self, key: str) -> str | None:
        """See `ObjectVersions.version`: None, always.

        Args:
            key: the stored object's key.
        """
        return None


def object_versions(
    store: Store, where: str, retry: RetryPolicy, on_retry: Callable[[], None]
) -> ObjectVersions:
    """How the cache learns `store`'s object versions (see the module).

    Args:
        store: the store read.
        where: the store as shown in messages (credentials redacted).
        retry: how a failed listing is tried again.
        on_retry: counts a retry.
    """
    root = local_root(store)
    if root is not None:
        return FileVersions(str(root.resolve()))
    if is_writable_icechunk(store):
        return NoVersions(where)
    snapshot = snapshot_id_of(store)
    if snapshot is not None:  # the repository, not how the snapshot was named (`@branch=...`)
        repository = where.rpartition("@")[0] or where
        return FixedVersions(f"icechunk|{repository}|{snapshot}", versioned=True)
    if isinstance(store, MemoryStore):
        return NoVersions(where)
    if isinstance(store, ObjectStore):
        client = store.store
        identity = where
        if isinstance(client, obstore.store.MemoryStore):
            identity = f"memory|{PROCESS_NONCE}|{id(client)}"
        return ListedVersions(client, identity, retry, on_retry)
    return FixedVersions(f"{where}|unversioned", versioned=False)
