"""Read a block's chunks inside the fetch event loop.

Two paths, chosen per array once (`chunk_codec.fast_decoder`):

- fast: `store.get` of each chunk key on the loop (at most `max_inflight` at once), and
  numcodecs decode straight into the block buffer in the decode pool, several chunks per
  thread hop, starting while other gets are still in flight;
- sharded: inner chunks by byte range from cached shard indexes, neighbours merged into
  one request (`shard_reader`), decoded like the fast path;
- zarr: `AsyncArray.getitem` per chunk, for layouts we do not decode ourselves (filters,
  F order, unusual codecs, nested sharding). zarr decodes in the loop's default executor
  too.

Arrays and the in-flight semaphore are created lazily by the first read, inside the loop
they belong to.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import zarr.api.asynchronous
from zarr.core.buffer import default_buffer_prototype

from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.read_plan import ChunkRead, ReadPlan, chunk_regions
from insitubatch_nodes.io.block_reader import ReadContext
from insitubatch_nodes.io.chunk_codec import ChunkDecoder, fast_decoder
from insitubatch_nodes.io.chunk_errors import ChunkBytesError, ChunkReadError, chunk_read_error
from insitubatch_nodes.io.redact import scrubbed
from insitubatch_nodes.io.retry import ReadGaveUp
from insitubatch_nodes.io.shard_index import shard_layout
from insitubatch_nodes.io.shard_reader import Loaded, ShardReader
from insitubatch_nodes.io.store_errors import first_line
from insitubatch_nodes.io.stores import local_root
from insitubatch_nodes.io.verified_decode import check_stored_length
from insitubatch_nodes.io.zarr_compat import chunk_key, pipeline_can_read, stored_object_key

T = TypeVar("T")


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


def _first_failure(failures: BaseExceptionGroup[BaseException]) -> BaseException:
    first = failures.exceptions[0]
    return _first_failure(first) if isinstance(first, BaseExceptionGroup) else first


@dataclass(frozen=True)
class _OpenArray:
    array: zarr.AsyncArray  # type: ignore[type-arg]
    decoder: ChunkDecoder | None
    shards: ShardReader | None = None


class ChunkReader:
    """A `BlockReader` whose blocks are numpy arrays decoded on the CPU (see the module).

    Args:
        context: what every reader of the fetch node shares (`block_reader.ReadContext`).
        layouts: the variables this reader reads, if not all of the context's (a device
            reader's fallback reads those the device cannot decode).
    """

    def __init__(
        self, context: ReadContext, layouts: Mapping[str, VariableLayout] | None = None
    ) -> None:
        self._store = context.store
        self._opened = context.opened_arrays
        self._buffers = context.block_buffers  # used from the event loop's thread only
        self._retry = context.retry
        self._shard_indexes = context.shard_indexes
        self._zarr_pipeline = context.zarr_pipeline
        self._layouts = dict(context.layouts if layouts is None else layouts)
        self._max_inflight = context.max_inflight
        self._decode_threads = context.decode_threads
        self._where = context.where
        self._stats = context.stats
        self._fast_path = context.fast_path
        self._local_root = local_root(context.store)
        self._arrays: dict[str, _OpenArray] | None = None
        self._scratches = threading.local()
        self._inflight: asyncio.Semaphore | None = None
        self._opening: asyncio.Lock | None = None

    async def _ready(self) -> dict[str, _OpenArray]:
        if self._opening is None:
            self._opening = asyncio.Lock()
            self._inflight = asyncio.Semaphore(self._max_inflight)
        async with self._opening:
            if self._arrays is None:
                try:
                    self._arrays = await self._retry.call(
                        self._open_arrays, "zarr metadata", self._stats.count_retry
                    )
                except ReadGaveUp as gave_up:
                    cause = gave_up.__cause__
                    assert cause is not None
                    raise OSError(
                        f"opening the arrays of {self._where} failed {gave_up}: "
                        f"{type(cause).__name__}: {first_line(cause)}"
                    ) from scrubbed(cause)
        return self._arrays

    async def _open_arrays(self) -> dict[str, _OpenArray]:
        names = list(self._layouts)
        found = await self._opened.open(names)
        arrays = {name: self._open(name, array) for name, array in zip(names, found, strict=True)}
        rerouted = [name for name, opened in arrays.items() if self._use_zarr_pipeline(opened)]
        if rerouted:  # arrays zarr must decode, through the named pipeline (e.g. zarrs)
            through = await self._opened.open(rerouted, self._zarr_pipeline)
            arrays.update({n: _OpenArray(a, None) for n, a in zip(rerouted, through, strict=True)})
        return arrays

    def _use_zarr_pipeline(self, opened: _OpenArray) -> bool:
        return (
            opened.decoder is None
            and self._zarr_pipeline is not None
            and pipeline_can_read(self._zarr_pipeline, opened.array.metadata)
        )

    def _open(self, name: str, array: zarr.AsyncArray) -> _OpenArray:  # type: ignore[type-arg]
        if not self._fast_path:
            return _OpenArray(array, None)
        decoder = fast_decoder(array)
        layout = shard_layout(array) if decoder is None else None
        if layout is None:
            return _OpenArray(array, decoder)
        assert self._inflight is not None
        shards = ShardReader(
            self._store,
            array.store_path.path,
            array.metadata,
            layout,
            local_root=self._local_root,
            inflight=self._inflight,
            indexes=self._shard_indexes.of(name),
            on_error=lambda coords, key, err: self._error(name, coords, key, err),
            stats=self._stats,
            retry=self._retry,
        )
        return _OpenArray(array, layout.inner, shards)

    def _error(
        self, name: str, coords: tuple[int, ...], key: str, err: BaseException
    ) -> ChunkReadError:
        return chunk_read_error(name, coords, key, self._where, err)

    async def _with_retries(self, attempt: Callable[[], Awaitable[T]], key: str) -> T:
        """`attempt()` under the retry policy, each try counted against `max_inflight`."""
        return await self._retry.call(attempt, key, self._stats.count_retry, limit=self._inflight)

    async def read_block(self, plan: ReadPlan) -> dict[str, np.ndarray]:
        arrays = await self._ready()
        buffers = {
            name: self._buffers.empty(
                (plan.buffer_rows[name], *self._layouts[name].sample_shape),
                np.dtype(self._layouts[name].dtype),
            )
            for name in plan.reads
        }
        local: list[tuple[str, ChunkRead]] = []  # plain file reads, all arrays together
        try:
            async with asyncio.TaskGroup() as group:
                for name, reads in plan.reads.items():
                    opened = arrays[name]
                    if opened.decoder is not None and opened.shards is None and self._local_root:
                        local.extend((name, read) for read in reads)
                    elif opened.shards is not None:
                        decode = self._decoding(name, opened.decoder, buffers[name])
                        group.create_task(opened.shards.read(reads, decode))
                    elif opened.decoder is None:
                        for read in reads:
                            group.create_task(
                                self._read_via_zarr(name, opened.array, read, buffers[name])
                            )
                    else:
                        group.create_task(self._read_fast(name, opened, reads, buffers[name]))
                if local:
                    group.create_task(self._read_local(local, arrays, buffers))
        except BaseExceptionGroup as failures:
            raise _first_failure(failures) from None  # the error itself, not a wrapper
        self._stats.add(blocks_fetched=1)
        return buffers

    def _object_key(self, name: str, read: ChunkRead) -> str:
        """Key of the stored object (chunk or shard) that holds `read`'s chunk."""
        assert self._arrays is not None
        array = self._arrays[name].array
        selection = self._layouts[name].chunk_selection(read.coords)
        return stored_object_key(array.metadata, array.store_path.path, selection)

    def _decode_one(
        self, name: str, decoder: ChunkDecoder, buffer: np.ndarray, read: ChunkRead, data: Any
    ) -> int:
        target, valid = chunk_regions(self._layouts[name], read)
        destination = buffer[target]
        try:
            check_stored_length(data, decoder.stored_bound)
            decoder.decode_into(data, destination, valid)
        except Exception as err:
            key = self._object_key(name, read)
            raise self._error(name, read.coords, key, err) from scrubbed(err)
        return int(destination.nbytes)

    def _decoding(
        self, name: str, decoder: ChunkDecoder | None, buffer: np.ndarray
    ) -> Callable[[Loaded], None]:
        """Decodes loaded chunks of `name` into their rows of `buffer` (a decode thread)."""
        assert decoder is not None

        def decode(items: Loaded) -> None:
            decoded = sum(
                self._decode_one(name, decoder, buffer, read, data) for read, data in items
            )
            self._stats.add(
                bytes_decoded=decoded, chunks_read=len(items), fast_path_chunks=len(items)
            )

        return decode

    async def _read_fast(
        self,
        name: str,
        opened: _OpenArray,
        reads: tuple[ChunkRead, ...],
        buffer: np.ndarray,
    ) -> None:
        assert opened.decoder is not None and self._inflight is not None
        decoder = opened.decoder
        metadata = opened.array.metadata
        prefix = opened.array.store_path.path
        loop = asyncio.get_running_loop()
        per_hop = max(1, len(reads) // (2 * self._decode_threads))
        fetched: list[tuple[ChunkRead, Any]] = []

        decode = self._decoding(name, decoder, buffer)

        async def get(read: ChunkRead) -> None:
            key = chunk_key(metadata, prefix, read.coords)
            assert self._inflight is not None
            try:
                found = await self._with_retries(
                    lambda: self._store.get(key, prototype=default_buffer_prototype()), key
                )
            except Exception as err:
                raise self._error(name, read.coords, key, err) from scrubbed(err)
            fetched.append((read, None if found is None else found.as_numpy_array()))
            if len(fetched) >= per_hop:
                batch = fetched[:]
                fetched.clear()
                await loop.run_in_executor(None, decode, batch)

        try:
            async with asyncio.TaskGroup() as group:
                for read in reads:
                    group.create_task(get(read))
        except BaseExceptionGroup as failures:
            raise _first_failure(failures) from None
        if fetched:
            await loop.run_in_executor(None, decode, fetched)

    def _scratch(self, nbytes: int) -> bytearray:
        """This decode thread's read buffer, at least `nbytes` long (reused: see read_file)."""
        scratch: bytearray | None = getattr(self._scratches, "buffer", None)
        if scratch is None or len(scratch) < nbytes:
            scratch = self._scratches.buffer = bytearray(nbytes)
        return scratch

    async def _read_local(
        self,
        work: list[tuple[str, ChunkRead]],
        arrays: Mapping[str, _OpenArray],
        buffers: Mapping[str, np.ndarray],
    ) -> None:
        """Plain file reads and decode of a whole block in one thread hop per decode thread
        (each hop wakes the loop once: fewer, larger hops leave more time for decoding)."""
        assert self._local_root is not None
        root = str(self._local_root)

        def read_and_decode(items: list[tuple[str, ChunkRead]]) -> None:
            decoded = 0
            bounds = (arrays[name].decoder for name, _ in items)
            scratch = self._scratch(max(d.stored_bound for d in bounds if d is not None))
            for name, read in items:
                opened = arrays[name]
                decoder = opened.decoder
                assert decoder is not None
                key = chunk_key(opened.array.metadata, opened.array.store_path.path, read.coords)
                try:
                    data = self._retry.call_sync(
                        lambda key=key, limit=decoder.stored_bound: read_file(
                            f"{root}/{key}", scratch, limit=limit
                        ),
                        key,
                        self._stats.count_retry,
                    )
                except Exception as err:
                    raise self._error(name, read.coords, key, err) from scrubbed(err)
                decoded += self._decode_one(name, decoder, buffers[name], read, data)
            self._stats.add(
                local_file_reads=len(items),
                bytes_decoded=decoded,
                chunks_read=len(items),
                fast_path_chunks=len(items),
            )

        hops = min(len(work), self._decode_threads)
        loop = asyncio.get_running_loop()
        await asyncio.gather(
            *(loop.run_in_executor(None, read_and_decode, work[i::hops]) for i in range(hops))
        )

    async def _read_via_zarr(
        self,
        name: str,
        array: zarr.AsyncArray,  # type: ignore[type-arg]
        read: ChunkRead,
        buffer: np.ndarray,
    ) -> None:
        target, _ = chunk_regions(self._layouts[name], read)
        selection = self._layouts[name].chunk_selection(read.coords)
        key = stored_object_key(array.metadata, array.store_path.path, selection)
        try:
            data = await self._with_retries(lambda: array.getitem(selection), key)
        except Exception as err:
            raise self._error(name, read.coords, key, err) from scrubbed(err)
        buffer[target] = data
        self._stats.add(chunks_read=1, bytes_decoded=int(np.asarray(data).nbytes))
