"""Read inner chunks of sharded arrays by byte range, never whole shards.

zarr reads an inner chunk with two requests (the shard's index, then the chunk) and never
keeps the index. Here each shard's index is read once and cached, the inner chunks a block
needs from one shard are grouped, and neighbouring ones are fetched in one ranged request
(`core.byte_ranges.coalesce`). Local stores get the same plan as `pread`s in the decode
threads; every other store gets ranged `store.get`s on the loop.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from zarr.abc.store import RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype

from insitubatch_nodes.core.byte_ranges import MergedRange, coalesce
from insitubatch_nodes.core.read_plan import ChunkRead
from insitubatch_nodes.io.metadata.zarr_compat import chunk_key
from insitubatch_nodes.io.reads.chunk_errors import ChunkBytesError
from insitubatch_nodes.io.reads.fetch_stats import FetchStats
from insitubatch_nodes.io.reads.local_files import open_or_none
from insitubatch_nodes.io.reads.read_slots import ReadSlots
from insitubatch_nodes.io.reads.retry import ReadGaveUp, RetryPolicy, range_refused
from insitubatch_nodes.io.reads.shard_index import ShardLayout, chunk_span
from insitubatch_nodes.io.stores.redact import scrubbed

Loaded = list[tuple[ChunkRead, Any]]  # (read, stored bytes or None for the fill value)
Located = list[tuple[ChunkRead, tuple[int, int]]]  # (read, its bytes [start, stop) in the shard)

MAX_GAP = 256 * 1024  # bytes a merged request may fetch only to bridge two chunks
MAX_SPAN = 16 * 1024 * 1024  # largest merged request
INDEX_CACHE_SHARDS = 65536  # indexes kept per array (each 16 bytes per inner chunk)


class ShardIndexCache:
    """Parsed shard indexes by key, least recently used out first; `None` for a shard
    that does not exist. Decode threads load through `load`, so that two blocks needing
    the same shard at once read its index once."""

    def __init__(self, capacity: int = INDEX_CACHE_SHARDS) -> None:
        self._capacity = capacity
        self._entries: OrderedDict[str, np.ndarray | None] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Event] = {}

    def load(self, key: str, fetch: Callable[[], np.ndarray | None]) -> np.ndarray | None:
        while True:
            with self._lock:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    return self._entries[key]
                waiting = self._loading.get(key)
                if waiting is None:
                    self._loading[key] = threading.Event()
            if waiting is None:
                break
            waiting.wait()  # then look again: the loader may have failed
        try:
            index = fetch()
            self.put(key, index)
            return index
        finally:
            with self._lock:
                self._loading.pop(key).set()

    def get(self, key: str) -> tuple[bool, np.ndarray | None]:
        with self._lock:
            if key not in self._entries:
                return False, None
            self._entries.move_to_end(key)
            return True, self._entries[key]

    def put(self, key: str, index: np.ndarray | None) -> None:
        with self._lock:
            self._entries[key] = index
            self._entries.move_to_end(key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)


class ShardIndexes:
    """One index cache per array, kept across epochs (the fetch node's readers are not)."""

    def __init__(self) -> None:
        self._caches: dict[str, ShardIndexCache] = {}

    def of(self, array_key: str) -> ShardIndexCache:
        return self._caches.setdefault(array_key, ShardIndexCache())


def _by_shard(
    layout: ShardLayout, reads: tuple[ChunkRead, ...]
) -> dict[tuple[int, ...], list[tuple[ChunkRead, int]]]:
    grouped: dict[tuple[int, ...], list[tuple[ChunkRead, int]]] = defaultdict(list)
    for read in reads:
        shard, slot = layout.locate(read.coords)
        grouped[shard].append((read, slot))
    return grouped


def _plan_requests(
    index: np.ndarray, members: list[tuple[ChunkRead, int]]
) -> tuple[Loaded, list[tuple[MergedRange, Located]]]:
    """Inner chunks never written (fill value), and the merged requests for the rest."""
    missing: Loaded = []
    present: Located = []
    for read, slot in members:
        span = chunk_span(index, slot)
        if span is None:
            missing.append((read, None))
        else:
            present.append((read, span))
    requests = coalesce([span for _, span in present], max_gap=MAX_GAP, max_span=MAX_SPAN)
    return missing, [(request, [present[i] for i in request.members]) for request in requests]


def _check_range(got: int, request: MergedRange) -> None:
    """A ranged read that came back short: the shard index points past the shard's end."""
    if got != request.stop - request.start:
        raise _past_the_end(request, got)


def _past_the_end(request: MergedRange, got: int = 0) -> ChunkBytesError:
    wanted = request.stop - request.start
    return ChunkBytesError(
        f"its shard index points at bytes {request.start}..{request.stop} of the shard, but "
        f"the shard holds only {got} of them (the shard was cut short, or its index points "
        f"past its end)",
        expected_nbytes=wanted,
        actual_nbytes=got,
    )


def _slice(data: Any, request: MergedRange, chunks: Located) -> Loaded:
    view = memoryview(data)
    return [(read, view[lo - request.start : hi - request.start]) for read, (lo, hi) in chunks]


class ShardReader:
    """Reads one sharded array's inner chunks; `decode` writes loaded chunks into the block."""

    def __init__(
        self,
        store: Store,
        prefix: str,
        metadata: Any,
        layout: ShardLayout,
        *,
        local_root: Path | None,
        inflight: ReadSlots,
        indexes: ShardIndexCache,
        on_error: Callable[[tuple[int, ...], str, BaseException], BaseException],
        stats: FetchStats,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._retry = retry or RetryPolicy()
        self._store = store
        self._prefix = prefix
        self._metadata = metadata
        self._layout = layout
        self._local_root = local_root
        self._inflight = inflight
        self._on_error = on_error
        self._stats = stats
        self._indexes = indexes
        self._index_reads: dict[str, asyncio.Future[np.ndarray | None]] = {}  # on the loop
        self._prototype = default_buffer_prototype()  # zarr's config, read once, not per get

    def _key(self, shard: tuple[int, ...]) -> str:
        return chunk_key(self._metadata, self._prefix, shard)

    async def _get(self, key: str, byte_range: Any) -> Any:
        """A ranged get under the retry policy, each try holding one of the read slots."""
        return await self._retry.call(
            lambda: self._store.get(key, prototype=self._prototype, byte_range=byte_range),
            key,
            self._stats.count_retry,
            limit=self._inflight,
        )

    async def read(self, reads: tuple[ChunkRead, ...], decode: Callable[[Loaded], None]) -> None:
        loop = asyncio.get_running_loop()
        shards = _by_shard(self._layout, reads)
        if self._local_root is not None:
            jobs = [
                loop.run_in_executor(None, self._read_local_shard, shard, members, decode)
                for shard, members in shards.items()
            ]
            await asyncio.gather(*jobs)
            return
        async with asyncio.TaskGroup() as group:
            for shard, members in shards.items():
                group.create_task(self._read_remote_shard(shard, members, decode))

    async def _index(self, key: str, first: tuple[int, ...]) -> np.ndarray | None:
        known, index = self._indexes.get(key)
        if known:
            return index
        if key in self._index_reads:  # another block is reading it right now
            return await asyncio.shield(self._index_reads[key])
        task = asyncio.ensure_future(self._read_index(key, first))
        self._index_reads[key] = task
        try:
            return await asyncio.shield(task)
        finally:
            if task.done():
                self._index_reads.pop(key, None)

    async def _read_index(self, key: str, first: tuple[int, ...]) -> np.ndarray | None:
        size = self._layout.index_nbytes
        where = SuffixByteRequest(size) if self._layout.index_at_end else RangeByteRequest(0, size)
        try:
            found = await self._get(key, where)
            index = None if found is None else self._layout.parse_index(found.to_bytes())
        except Exception as err:
            raise self._on_error(first, key, err) from scrubbed(err)
        self._stats.add(shard_index_reads=1)
        self._indexes.put(key, index)
        return index

    async def _read_remote_shard(
        self,
        shard: tuple[int, ...],
        members: list[tuple[ChunkRead, int]],
        decode: Callable[[Loaded], None],
    ) -> None:
        loop = asyncio.get_running_loop()
        key = self._key(shard)
        index = await self._index(key, members[0][0].coords)
        if index is None:
            await loop.run_in_executor(None, decode, [(read, None) for read, _ in members])
            return
        missing, requests = _plan_requests(index, members)

        async def fetch(request: MergedRange, chunks: Located) -> None:
            try:
                found = await self._get(key, RangeByteRequest(request.start, request.stop))
                if found is None:
                    raise FileNotFoundError(f"shard {key!r} disappeared while being read")
                _check_range(len(found), request)
            except Exception as err:
                if range_refused(err):
                    err = _past_the_end(request)
                raise self._on_error(chunks[0][0].coords, key, err) from scrubbed(err)
            self._stats.add(range_requests=1)
            loaded = _slice(found.as_numpy_array(), request, chunks)
            await loop.run_in_executor(None, decode, loaded)

        jobs = [fetch(request, chunks) for request, chunks in requests]
        if missing:
            jobs.append(loop.run_in_executor(None, decode, missing))
        await asyncio.gather(*jobs)

    def _read_local_shard(
        self,
        shard: tuple[int, ...],
        members: list[tuple[ChunkRead, int]],
        decode: Callable[[Loaded], None],
    ) -> None:
        assert self._local_root is not None
        key = self._key(shard)
        first = members[0][0].coords
        path = self._local_root / key
        try:
            opened = self._retry.call_sync(
                lambda: open_or_none(str(path)), key, self._stats.count_retry
            )
        except ReadGaveUp as err:
            raise self._on_error(first, key, err) from scrubbed(err)
        if opened is None:
            decode([(read, None) for read, _ in members])
            return
        descriptor = opened

        def pread(size: int, start: int) -> bytes:
            return self._retry.call_sync(
                lambda: os.pread(descriptor, size, start), key, self._stats.count_retry
            )

        try:

            def read_index() -> np.ndarray:
                size = self._layout.index_nbytes
                shard_nbytes = os.fstat(descriptor).st_size
                start = max(0, shard_nbytes - size) if self._layout.index_at_end else 0
                self._stats.add(shard_index_reads=1)
                return self._layout.parse_index(pread(size, start), shard_nbytes)

            index = self._indexes.load(key, read_index)
            assert index is not None
            missing, requests = _plan_requests(index, members)
            loaded = list(missing)
            for request, chunks in requests:
                data = pread(request.stop - request.start, request.start)
                _check_range(len(data), request)
                loaded.extend(_slice(data, request, chunks))
            self._stats.add(range_requests=len(requests))
        except (OSError, ValueError, ReadGaveUp) as err:
            raise self._on_error(first, key, err) from scrubbed(err)
        finally:
            os.close(descriptor)
        decode(loaded)
