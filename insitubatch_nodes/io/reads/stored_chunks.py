"""Fetch stored chunk bytes, the one way both block readers do it, and hand them to a sink.

A reader says which chunks of which arrays it needs and what to do with each chunk's
stored bytes (the sink: decode into numpy memory on the CPU, or collect for the GPU); this
module fetches them, under the context's retry policy and in-flight limit, and counts what
it read:

- local stores: plain file reads in the decode threads, every array of a block together,
  one thread hop per decode thread (each hop wakes the loop once: fewer, larger hops leave
  more time for decoding);
- other stores: `store.get` of each chunk key on the loop, handed to the sink a few chunks
  per thread hop, starting while other gets are still in flight;
- sharded arrays: inner chunks by byte range from cached shard indexes (`shard_reader`);
- with a chunk cache (`ReadContext.cache`), chunks it holds come from local disk, beside
  the store's reads of the rest, which are admitted to it (`cached_chunks`).

Every chunk's stored length is checked against what a valid chunk can take before the
sink sees it. The sink runs in a decode thread; the bytes it gets are valid only during
the call (local reads reuse a scratch buffer per thread), so a sink that keeps them
copies them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from zarr.core.buffer import Buffer, default_buffer_prototype

from insitubatch_nodes.core.read_plan import ChunkRead
from insitubatch_nodes.io.reads.block_reader import ReadContext
from insitubatch_nodes.io.reads.cached_chunks import CachedChunks
from insitubatch_nodes.io.reads.chunk_errors import ChunkReadError, chunk_read_error
from insitubatch_nodes.io.reads.local_files import read_file
from insitubatch_nodes.io.reads.object_versions import object_versions
from insitubatch_nodes.io.reads.read_slots import ReadSlots
from insitubatch_nodes.io.reads.shard_reader import Loaded, ShardReader
from insitubatch_nodes.io.reads.stored_array import ChunkSink, StoredArray
from insitubatch_nodes.io.reads.verified_decode import check_stored_length
from insitubatch_nodes.io.stores.open_store import local_root
from insitubatch_nodes.io.stores.redact import scrubbed

T = TypeVar("T")


def first_failure(failures: BaseExceptionGroup[BaseException]) -> BaseException:
    """The first error of a task group's failures, however deeply grouped.

    Args:
        failures: what a task group raised.
    """
    first = failures.exceptions[0]
    return first_failure(first) if isinstance(first, BaseExceptionGroup) else first


class ChunkFetcher:
    """Fetches stored chunks for the readers of one event loop (see the module).

    Made in the loop's epoch and shared by a reader and its fallback, so that one
    in-flight limit covers every read of the loop.

    Args:
        context: what every reader of the fetch node shares (`block_reader.ReadContext`).
    """

    def __init__(self, context: ReadContext) -> None:
        self._context = context
        self._retry = context.retry
        self._stats = context.stats
        self._local_root = local_root(context.store)
        self._inflight = ReadSlots(context.inflight, context.stats)
        # zarr looks the buffer classes up in its config at each call: once per fetcher
        self._prototype = default_buffer_prototype()
        self._shard_readers: dict[str, ShardReader] = {}
        self._scratches = threading.local()
        self._cached = (
            None
            if context.cache is None
            else CachedChunks(
                context.cache,
                lambda: object_versions(
                    context.store, context.where, self._retry, self._stats.count_retry
                ),
                self._stats,
                context.decode_threads,
            )
        )

    def error(
        self, name: str, coords: tuple[int, ...], key: str, err: BaseException
    ) -> ChunkReadError:
        """The error a reader raises for chunk `coords` of `name`, whose object `key` failed.

        Args:
            name: the variable.
            coords: the chunk's coordinates.
            key: the stored object's key.
            err: what went wrong.
        """
        return chunk_read_error(name, coords, key, self._context.where, err)

    async def with_retries(self, attempt: Callable[[], Awaitable[T]], key: str) -> T:
        """`attempt()` under the retry policy, each try counted against the in-flight limit.

        Args:
            attempt: one try of the read.
            key: the object read, which seeds the retry delays.
        """
        return await self._retry.call(attempt, key, self._stats.count_retry, limit=self._inflight)

    async def fetch(
        self,
        reads: Mapping[StoredArray, tuple[ChunkRead, ...]],
        sink: ChunkSink,
        epoch: int | None = None,
    ) -> None:
        """Fetch every chunk `reads` lists and hand each to `sink` once; the first failure
        is raised (a `ChunkReadError` naming the chunk) and the rest are cancelled.

        Args:
            reads: the chunks wanted, by array.
            sink: what takes the chunks' bytes (see `ChunkSink`).
            epoch: the epoch of the block read (the cache learns the store's object
                versions afresh each epoch), or None when not known.
        """
        try:
            if self._cached is None:
                await self._fetch_from_store(reads, sink)
                return
            try:
                hits, reads, digests = await self._cached.partition(reads, epoch)
                # local chunk files are read into a scratch each decode thread reuses
                admitting = self._cached.admitting(sink, digests, self._local_root is not None)
                async with asyncio.TaskGroup() as group:  # hits beside the store's reads
                    served = group.create_task(
                        self._cached.serve(hits, lambda array: self._checked(array, sink))
                    )
                    group.create_task(self._fetch_from_store(reads, admitting))
                damaged = served.result()
                if damaged:  # entries that failed their check: read from the store after all
                    await self._fetch_from_store(damaged, admitting)
            finally:
                await self._cached.finished()
        except BaseExceptionGroup as failures:
            raise first_failure(failures) from None  # the error itself, not a wrapper

    async def _fetch_from_store(
        self, reads: Mapping[StoredArray, tuple[ChunkRead, ...]], sink: ChunkSink
    ) -> None:
        local: list[tuple[StoredArray, ChunkRead]] = []
        async with asyncio.TaskGroup() as group:
            for array, wanted in reads.items():
                if array.shards is not None:
                    shards = self._shard_reader(array)
                    group.create_task(shards.read(wanted, self._checked(array, sink)))
                elif self._local_root is not None:
                    local.extend((array, read) for read in wanted)
                else:
                    group.create_task(self._get_all(array, wanted, sink))
            if local:
                group.create_task(self._read_local(local, sink))

    def _shard_reader(self, array: StoredArray) -> ShardReader:
        found = self._shard_readers.get(array.name)
        if found is None:
            assert array.shards is not None
            found = self._shard_readers[array.name] = ShardReader(
                self._context.store,
                array.array.store_path.path,
                array.array.metadata,
                array.shards,
                local_root=self._local_root,
                inflight=self._inflight,
                indexes=self._context.shard_indexes.of(array.name),
                on_error=lambda coords, key, err: self.error(array.name, coords, key, err),
                stats=self._stats,
                retry=self._retry,
            )
        return found

    def _checked(self, array: StoredArray, sink: ChunkSink) -> Callable[[Loaded], None]:
        """`sink` for `array`'s chunks, each refused first if longer than a valid one."""
        bound = array.decoder.stored_bound

        def take(items: Loaded) -> None:
            for read, data in items:
                try:
                    check_stored_length(data, bound)
                except Exception as err:
                    key = array.key(read.coords)
                    raise self.error(array.name, read.coords, key, err) from scrubbed(err)
            sink(array, items)

        return take

    async def _get_all(
        self, array: StoredArray, reads: tuple[ChunkRead, ...], sink: ChunkSink
    ) -> None:
        """One task per get and nothing else per chunk: no task group (its wrapper and its
        done callback, a loop iteration each, per get), the gets counting themselves
        down to the one future this coroutine waits on. The first failure sets it, and
        every get still running is cancelled and waited for before it is raised, so none
        outlives the block."""
        if not reads:
            return
        loop = asyncio.get_running_loop()
        per_hop = max(1, len(reads) // (2 * self._context.decode_threads))
        fetched: Loaded = []
        take = self._checked(array, sink)
        store, prototype, retry = self._context.store, self._prototype, self._retry
        on_retry, slots = self._stats.count_retry, self._inflight
        timeout_s = retry.attempt_timeout_s
        done: asyncio.Future[None] = loop.create_future()
        got = running = len(reads)

        def fail(err: BaseException) -> None:
            if not done.done():
                done.set_exception(err)

        async def get(read: ChunkRead) -> None:
            nonlocal got, running
            key = array.key(read.coords)

            def attempt() -> Awaitable[Buffer | None]:
                return store.get(key, prototype=prototype)

            try:
                try:  # the first try without the retry wrapper: most reads need no other
                    found = await slots.run(attempt, timeout_s)
                except Exception as first:
                    found = await retry.call(attempt, key, on_retry, limit=slots, failed=first)
            except Exception as err:
                failure = self.error(array.name, read.coords, key, err)
                failure.__cause__ = scrubbed(err)
                fail(failure)
                return
            fetched.append((read, None if found is None else found.as_numpy_array()))
            got -= 1
            if len(fetched) >= per_hop or not got:
                batch = fetched[:]
                fetched.clear()
                try:
                    await loop.run_in_executor(None, take, batch)
                except Exception as err:
                    fail(err)
                    return
            running -= 1
            if not running and not done.done():
                done.set_result(None)

        gets = [loop.create_task(get(read)) for read in reads]
        try:
            await done
        except BaseException:
            for task in gets:
                task.cancel()
            await asyncio.wait(gets)
            raise

    def _scratch(self, nbytes: int) -> bytearray:
        """This decode thread's read buffer, at least `nbytes` long (reused: see read_file)."""
        scratch: bytearray | None = getattr(self._scratches, "buffer", None)
        if scratch is None or len(scratch) < nbytes:
            scratch = self._scratches.buffer = bytearray(nbytes)
        return scratch

    async def _read_local(self, work: list[tuple[StoredArray, ChunkRead]], sink: ChunkSink) -> None:
        assert self._local_root is not None
        root = str(self._local_root)

        def read_each(items: list[tuple[StoredArray, ChunkRead]]) -> None:
            scratch = self._scratch(max(array.decoder.stored_bound for array, _ in items))
            for array, read in items:
                key = array.key(read.coords)
                limit = array.decoder.stored_bound
                try:
                    data = self._retry.call_sync(
                        lambda key=key, limit=limit: read_file(
                            f"{root}/{key}", scratch, limit=limit
                        ),
                        key,
                        self._stats.count_retry,
                    )
                    check_stored_length(data, limit)  # a scratch may be larger than `limit`
                except Exception as err:
                    raise self.error(array.name, read.coords, key, err) from scrubbed(err)
                sink(array, [(read, data)])  # before the next read reuses the scratch
            self._stats.add(local_file_reads=len(items))

        hops = min(len(work), self._context.decode_threads)
        loop = asyncio.get_running_loop()
        await asyncio.gather(
            *(loop.run_in_executor(None, read_each, work[i::hops]) for i in range(hops))
        )
