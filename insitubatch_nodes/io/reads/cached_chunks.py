"""The chunk cache as a source in front of the store, for one fetcher (one epoch's loop).

`ChunkFetcher.fetch` asks `partition` first, which tells the chunks the cache holds, for
the object's current version, from the rest by the in-memory index alone (no entry read,
and no thread hop unless versions need a `stat`), so the misses go to the store at once,
as they would without a cache, through `admitting(sink)`: once the sink has taken a
missed chunk's bytes (and so checked them), they are admitted to the cache, written by
the cache's own thread unless the buffer is about to be reused. Meanwhile
`serve` verifies the hits in the decode threads and hands them to the sink there,
straight from the mapped segment; a hit found damaged is read from the store after all.
When the fetcher's last block in flight is done (`finished`), the entries queued
meanwhile are written and the segment sealed if due (`ChunkCache.due`): at the latest at
the end of each epoch; the wait is a decode thread's, never the event loop's.

A hit holds no read slot: it never feeds the in-flight target's latency estimate
(`core.inflight_target`), which must describe the store, and is counted apart
(`FetchStats.cache_hits`, `cache_bytes_served`), so `bytes_fetched` stays the store's
traffic. Hit or miss, the sink gets the same bytes, so batches never depend on the cache.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from insitubatch_nodes.core.read_plan import ChunkRead
from insitubatch_nodes.io.cache.chunk_cache import ChunkCache, key_hasher, scratch_nbytes
from insitubatch_nodes.io.reads.fetch_stats import FetchStats
from insitubatch_nodes.io.reads.object_versions import ObjectVersions
from insitubatch_nodes.io.reads.shard_reader import Loaded

if TYPE_CHECKING:
    from insitubatch_nodes.io.reads.stored_array import ChunkSink, StoredArray

Reads = Mapping["StoredArray", tuple[ChunkRead, ...]]
Digests = dict[tuple[str, tuple[int, ...]], bytes]  # (variable, chunk) -> its entry's digest
Hits = list[tuple["StoredArray", ChunkRead, bytes]]  # chunks the cache holds, with digests


def metadata_text(array: StoredArray) -> str:
    """The array's metadata as canonical JSON: part of every entry's key, so an array
    rewritten with another dtype, codec or chunking never matches the old entries.

    Args:
        array: the array.
    """
    return json.dumps(array.array.metadata.to_dict(), sort_keys=True, default=str)


class CachedChunks:
    """`cache` in front of the store for one fetcher (see the module).

    Args:
        cache: the cache folder, opened once per loader.
        versions: makes the store's identity and its objects' versions afresh, once per
            epoch, so each epoch sees the objects as they are (also when one fetcher reads
            on across epochs, `read_across_epochs`).
        stats: the counters hits, misses and admissions are added to.
        decode_threads: how many threads to spread lookups over.
    """

    def __init__(
        self,
        cache: ChunkCache,
        versions: Callable[[], ObjectVersions],
        stats: FetchStats,
        decode_threads: int,
    ) -> None:
        self._cache = cache
        self._new_versions = versions
        self._versions = versions()
        self._epoch: int | None = None
        self._stats = stats
        self._threads = decode_threads
        self._hashers: dict[str, Any] = {}  # by variable: its key's shared parts, hashed
        self._scratches = threading.local()
        self._fetching = 0

    async def partition(self, reads: Reads, epoch: int | None) -> tuple[Hits, Reads, Digests]:
        """Split `reads` into the chunks the cache holds (for the object's current version)
        and the rest, with the digests the cacheable ones are admitted under; no entry is
        read yet, so the misses go to the store at once. Begins a block's fetch (see
        `finished`).

        Args:
            reads: the chunks wanted, by array.
            epoch: the epoch the block belongs to (a later one than seen so far learns
                the objects' versions afresh), or None when not known.
        """
        self._fetching += 1
        self._cache.refresh()
        if epoch is not None:
            if self._epoch is not None and epoch > self._epoch:
                self._versions = self._new_versions()
            self._epoch = epoch if self._epoch is None else max(self._epoch, epoch)
        versions = self._versions  # the same for the whole block
        for array in reads:
            path = array.array.store_path.path
            await versions.prepare(f"{path}/" if path else "")
            if array.name not in self._hashers:
                self._hashers[array.name] = key_hasher(
                    versions.identity, path, metadata_text(array)
                )
        if versions.blocking:  # a `stat` per chunk: not on the event loop
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(None, self._partition, reads, versions)
        return self._partition(reads, versions)

    def _partition(self, reads: Reads, versions: ObjectVersions) -> tuple[Hits, Reads, Digests]:
        hits: Hits = []
        missed: dict[StoredArray, list[ChunkRead]] = {}
        digests: Digests = {}
        for array, wanted in reads.items():
            hasher = self._hashers[array.name]
            for read in wanted:
                key = array.key(read.coords)
                version = versions.version(key)
                if version is None:  # no object to cache against: read it as usual
                    missed.setdefault(array, []).append(read)
                    continue
                finished = hasher.copy()
                finished.update(f"\0{read.coords!r}\0{key}\0{version}".encode())
                digest = finished.digest()
                digests[(array.name, read.coords)] = digest
                if self._cache.holds(digest):
                    hits.append((array, read, digest))
                else:
                    missed.setdefault(array, []).append(read)
        self._stats.add(cache_misses=sum(map(len, missed.values())))
        return hits, {array: tuple(wanted) for array, wanted in missed.items()}, digests

    async def serve(
        self, hits: Hits, take: Callable[[StoredArray], Callable[[Loaded], None]]
    ) -> Reads:
        """Hand each of `hits` (`partition`'s) to `take(array)`, verified, in the decode
        threads; the ones found damaged, to be read from the store instead.

        Args:
            hits: the chunks the cache holds.
            take: the checked sink for an array's chunks.
        """
        if not hits:
            return {}
        hops = max(1, min(len(hits), self._threads))
        loop = asyncio.get_running_loop()
        parts = await asyncio.gather(
            *(
                loop.run_in_executor(None, self._serve_some, hits[i::hops], take)
                for i in range(hops)
            )
        )
        damaged: dict[StoredArray, list[ChunkRead]] = {}
        for part in parts:
            for array, read in part:
                damaged.setdefault(array, []).append(read)
        return {array: tuple(wanted) for array, wanted in damaged.items()}

    def _serve_some(
        self, hits: Hits, take: Callable[[StoredArray], Callable[[Loaded], None]]
    ) -> list[tuple[StoredArray, ChunkRead]]:
        damaged: list[tuple[StoredArray, ChunkRead]] = []
        served = 0
        try:
            for array, read, digest in hits:
                limit = array.decoder.stored_bound
                found = self._cache.lookup(digest, limit, self._scratch(scratch_nbytes(limit)))
                if found is None:
                    damaged.append((array, read))
                    continue
                take(array)([(read, found)])  # before the next lookup reuses the scratch
                served += len(found)
        finally:
            self._stats.add(
                cache_hits=len(hits) - len(damaged),
                cache_misses=len(damaged),
                cache_bytes_served=served,
            )
        return damaged

    async def finished(self) -> None:
        """One block's fetch (begun by `partition`) is over; seal the segment written if
        due, in a decode thread: at an epoch's end the seal waits for the entries still
        queued (tens of ms), and the loop's other reads must not wait with it."""
        self._fetching -= 1
        idle = self._fetching == 0
        if self._cache.due(idle=idle):
            # at an epoch's end, with every entry it admitted
            seal = functools.partial(self._cache.seal, wait=idle)
            await asyncio.get_running_loop().run_in_executor(None, seal)

    def admitting(self, sink: ChunkSink, digests: Digests, borrowed: bool) -> ChunkSink:
        """`sink`, then each chunk it took whose digest is in `digests` admitted to the cache:
        on the cache's writing thread, or at once when the bytes are `borrowed`.

        Args:
            sink: what takes the chunks' bytes.
            digests: the entries missed chunks are admitted under (`serve`'s).
            borrowed: whether the bytes the sink gets are a buffer reused once it returns
                (a decode thread's scratch), so they are written before it is.
        """
        cache, stats = self._cache, self._stats

        def count(written: int) -> None:
            if written:
                stats.add(cache_bytes_written=written)

        def take_and_admit(array: StoredArray, items: Loaded) -> None:
            sink(array, items)
            for read, data in items:
                digest = digests.get((array.name, read.coords))
                if digest is None or data is None:
                    continue
                if borrowed:
                    count(cache.admit(digest, data))
                else:
                    cache.admit_later(digest, data, count)

        return take_and_admit

    def _scratch(self, nbytes: int) -> bytearray:
        scratch: bytearray | None = getattr(self._scratches, "buffer", None)
        if scratch is None or len(scratch) < nbytes:
            scratch = self._scratches.buffer = bytearray(nbytes)
        return scratch
