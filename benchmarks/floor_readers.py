"""The readers the decode-floor benchmark holds the loader against, each reading every chunk
of a store's variables once per epoch, in tasks of many chunks of one variable.

The floor decodes stored bytes already in RAM into reused memory, on a pool of decode
threads: no read, no allocation, no Python per chunk beyond the decode call. Every other
reader adds one thing to it (plain file reads; gets from a zarr store; a native reader),
so the gap between a reader and the floor is what that thing costs. None of them checks
what the loader checks (bounded decode, exact sizes): they are what reading could cost,
not replacements for it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import zarr
from numcodecs.abc import Codec
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype

from insitubatch_nodes.io.metadata.zarr_compat import (
    chunk_key,
    codec_pipeline,
    run_on_zarr_loop,
)
from insitubatch_nodes.io.reads.codecs import ArrayCompressor, v3_compressor
from insitubatch_nodes.io.reads.local_files import read_file

# Thread names the benchmark counts as a decode pool (Python CPU outside them is the serial
# part): ours, the loader's, and zarr's: its codecs decode, and its LocalStore reads,
# through `asyncio.to_thread`, on its loop's default executor (asyncio's `asyncio_N`, or
# `zarr_pool` once zarr has made its own).
DECODE_POOL = "floor-decode"
DECODE_POOLS = (DECODE_POOL, "insitubatch-fetch-decode", "asyncio_", "zarr_pool")
ZARRS_PIPELINE = "zarrs.ZarrsCodecPipeline"


@dataclass(frozen=True)
class EpochChunks:
    """Every chunk of some variables of a store chunked along time only, by variable and
    in time order: what one epoch of each reader reads.

    Args:
        root: the store's directory.
        variables: the arrays read (the same shape, chunks, dtype and codec).
        keys: each variable's chunk keys, relative to `root`, in time order.
        chunk_shape: one chunk's shape.
        dtype: the arrays' dtype.
        codec: numcodecs' decoder for the arrays' one compressor.
    """

    root: Path
    variables: tuple[str, ...]
    keys: dict[str, list[str]]
    chunk_shape: tuple[int, ...]
    dtype: np.dtype[Any]
    codec: Codec

    @classmethod
    def of(cls, root: Path, variables: tuple[str, ...]) -> EpochChunks:
        """Read the arrays' metadata and list their chunks.

        Args:
            root: the store's directory.
            variables: the arrays to read.
        """
        group = zarr.open_group(str(root), mode="r")
        keys: dict[str, list[str]] = {}
        array = group[variables[0]]
        for name in variables:
            array = group[name]
            assert isinstance(array, zarr.Array)
            count = -(-array.shape[0] // array.chunks[0])
            rest = (0,) * (array.ndim - 1)
            keys[name] = [chunk_key(array.metadata, name, (i, *rest)) for i in range(count)]
        assert isinstance(array, zarr.Array)
        (compressor,) = array.compressors
        known = v3_compressor(compressor.to_dict())  # numcodecs' decoder, as the library's
        assert isinstance(known, ArrayCompressor), known
        return cls(root, variables, keys, array.chunks, np.dtype(array.dtype), known.codec)

    @property
    def chunk_nbytes(self) -> int:
        """Bytes of one decoded chunk."""
        return int(np.prod(self.chunk_shape)) * self.dtype.itemsize

    @property
    def count(self) -> int:
        """Chunks in an epoch, every variable's."""
        return sum(len(keys) for keys in self.keys.values())

    def tasks(self, task_chunks: int) -> list[tuple[str, int, int]]:
        """An epoch cut into `(variable, first chunk, end chunk)` runs of `task_chunks`.

        Args:
            task_chunks: chunks per task (the last of a variable may have fewer).
        """
        return [
            (name, start, min(start + task_chunks, len(keys)))
            for name, keys in self.keys.items()
            for start in range(0, len(keys), task_chunks)
        ]


class Reader(Protocol):
    """One way to read an epoch; `read_epoch` returns the chunks it decoded."""

    name: str

    def read_epoch(self) -> int:
        """Read and decode every chunk once; the chunks decoded."""
        ...

    def close(self) -> None:
        """Stop what the reader started (its pool)."""
        ...


class _ReusedMemory:
    """Each thread's memory, allocated on its first task and reused by every later one
    (fresh memory's page faults cost as much as a decode): a block of `task_chunks` chunks
    to decode into and, for readers that read the files themselves, a scratch buffer.

    Args:
        chunks: what is read.
        task_chunks: chunks per task.
    """

    def __init__(self, chunks: EpochChunks, task_chunks: int) -> None:
        self._shape = (task_chunks, *chunks.chunk_shape)
        self._dtype = chunks.dtype
        # more than any stored chunk: at worst raw blocks and framing
        self._scratch_nbytes = 2 * chunks.chunk_nbytes + 4096
        self._local = threading.local()

    def block(self) -> np.ndarray:
        """The calling thread's block."""
        block: np.ndarray | None = getattr(self._local, "block", None)
        if block is None:
            block = self._local.block = np.zeros(self._shape, self._dtype)
        return block

    def scratch(self) -> bytearray:
        """The calling thread's buffer for one stored chunk's bytes."""
        scratch: bytearray | None = getattr(self._local, "scratch", None)
        if scratch is None:
            scratch = self._local.scratch = bytearray(self._scratch_nbytes)
        return scratch


class _DecodePool:
    """What the readers that decode on a pool of their own share: the epoch cut into tasks,
    each thread's reused block, and the decode of a task's stored chunks into it.

    Args:
        chunks: what to read.
        threads: the decode pool's threads.
        task_chunks: chunks per task.
    """

    def __init__(self, chunks: EpochChunks, threads: int = 2, task_chunks: int = 32) -> None:
        self._chunks = chunks
        self._tasks = chunks.tasks(task_chunks)
        self._memory = _ReusedMemory(chunks, task_chunks)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix=DECODE_POOL)

    def _decode_stored(self, stored: Iterable[Any]) -> None:
        """Decode a task's stored chunks, in order, into the calling thread's block."""
        block, codec = self._memory.block(), self._chunks.codec
        for slot, data in enumerate(stored):
            codec.decode(data, out=block[slot])

    def _decode(self, task: tuple[str, int, int]) -> None:
        raise NotImplementedError

    def read_epoch(self) -> int:
        """Decode every chunk once, a task per call on the pool; the chunks decoded."""
        for _ in self._pool.map(self._decode, self._tasks):
            pass
        return self._chunks.count

    def close(self) -> None:
        """Stop the decode pool."""
        self._pool.shutdown()


class DecodeFloor(_DecodePool):
    """Decode only: every stored chunk's bytes read into RAM when made, then each epoch
    decoded (numcodecs, GIL released) into each thread's reused block, `task_chunks` chunks
    per task.

    Args:
        chunks: what to read.
        threads: the decode pool's threads.
        task_chunks: chunks per task.
    """

    name = "decode only, bytes in RAM (the floor)"

    def __init__(self, chunks: EpochChunks, threads: int = 2, task_chunks: int = 32) -> None:
        super().__init__(chunks, threads, task_chunks)
        self._stored = {
            name: [(chunks.root / key).read_bytes() for key in keys]
            for name, keys in chunks.keys.items()
        }

    def _decode(self, task: tuple[str, int, int]) -> None:
        name, start, stop = task
        self._decode_stored(self._stored[name][start:stop])


class PlainFileReads(_DecodePool):
    """The floor plus reading each chunk file in the decode threads, with the library's
    plain file read into each thread's reused scratch (`io/reads/local_files.py`).

    Args:
        chunks: what to read.
        threads: the decode pool's threads.
        task_chunks: chunks per task.
    """

    name = "plain file reads + numcodecs"

    def _decode(self, task: tuple[str, int, int]) -> None:
        name, start, stop = task
        scratch, root = self._memory.scratch(), str(self._chunks.root)
        keys = self._chunks.keys[name][start:stop]
        self._decode_stored(read_file(f"{root}/{key}", scratch) for key in keys)


class StoreGets(_DecodePool):
    """The floor plus one `store.get` per chunk on an asyncio loop in the calling thread,
    at most `inflight` at a time; each task's chunks are decoded together once all have
    arrived. With `decode=False` only the gets: what the store itself costs per get.

    Args:
        store: the zarr store to get from (an in-memory copy behind a delay, obstore's
            local store, ...).
        label: what the store is, for the row's name.
        chunks: what to read (its keys name the store's objects).
        threads: the decode pool's threads.
        task_chunks: chunks per task.
        inflight: gets in flight at most.
        decode: decode what was got (False: the store's cost alone).
    """

    def __init__(
        self,
        store: Store,
        label: str,
        chunks: EpochChunks,
        threads: int = 2,
        task_chunks: int = 32,
        inflight: int = 256,
        decode: bool = True,
    ) -> None:
        super().__init__(chunks, threads, task_chunks)
        self.name = f"{label} get per chunk" + (" + numcodecs" if decode else ", no decode")
        self._store, self._decodes = store, decode
        self._tasks_at_once = max(1, inflight // task_chunks)

    async def _epoch(self) -> None:
        loop = asyncio.get_running_loop()
        prototype = default_buffer_prototype()
        gate = asyncio.Semaphore(self._tasks_at_once)

        async def get(key: str) -> Any:
            found = await self._store.get(key, prototype=prototype)
            assert found is not None, key
            return found.as_numpy_array()

        async def task(name: str, start: int, stop: int) -> None:
            async with gate:
                keys = self._chunks.keys[name][start:stop]
                got = await asyncio.gather(*(get(key) for key in keys))
                if self._decodes:
                    await loop.run_in_executor(self._pool, self._decode_stored, got)

        await asyncio.gather(*(task(*t) for t in self._tasks))

    def read_epoch(self) -> int:
        """Get (and decode) every chunk once; the chunks read."""
        asyncio.run(self._epoch())
        return self._chunks.count


class ZarrArrays:
    """zarr-python reading the store in slices of `task_chunks` chunks, `calls` getitems at
    a time on zarr's own loop, through its default codec pipeline or a named one.

    Args:
        store: a zarr store or a local path.
        label: what the reader is, for the row's name.
        chunks: what to read.
        pipeline: the codec pipeline's path (`ZARRS_PIPELINE`), or None for zarr's default.
        task_chunks: chunks per getitem.
        calls: getitems in flight at most.
    """

    def __init__(
        self,
        store: Store | str,
        label: str,
        chunks: EpochChunks,
        pipeline: str | None = None,
        task_chunks: int = 32,
        calls: int = 8,
    ) -> None:
        self.name = label
        self._chunks = chunks
        self._calls = calls
        self._tasks = chunks.tasks(task_chunks)
        self._steps = chunks.chunk_shape[0]
        with codec_pipeline(pipeline):  # arrays keep the pipeline they were opened with
            group = zarr.open_group(store, mode="r")
            self._arrays = {name: _async_array(group[name]) for name in chunks.variables}

    async def _epoch(self) -> None:
        gate = asyncio.Semaphore(self._calls)

        async def one(name: str, start: int, stop: int) -> None:
            async with gate:
                await self._arrays[name].getitem(slice(start * self._steps, stop * self._steps))

        await asyncio.gather(*(one(*t) for t in self._tasks))

    def read_epoch(self) -> int:
        """Read every chunk once; the chunks read."""
        run_on_zarr_loop(self._epoch())
        return self._chunks.count

    def close(self) -> None:
        """Nothing to stop: zarr's loop and pool are process-wide."""


def _async_array(array: Any) -> Any:
    """The `AsyncArray` behind a zarr `Array` (`async_array` from zarr 3.1.4 on)."""
    return getattr(array, "async_array", None) or array._async_array


class Tensorstore:
    """tensorstore's zarr3 driver on the file kvstore, reading slices of `task_chunks`
    chunks, `calls` reads at a time, in its own native threads (each read allocates its
    result: tensorstore reads into no given memory).

    Args:
        chunks: what to read.
        task_chunks: chunks per read.
        calls: reads in flight at most.
    """

    name = "tensorstore (zarr3 driver, file kvstore)"

    def __init__(self, chunks: EpochChunks, task_chunks: int = 32, calls: int = 8) -> None:
        import tensorstore

        self._chunks = chunks
        self._calls = calls
        self._tasks = chunks.tasks(task_chunks)
        self._steps = chunks.chunk_shape[0]
        self._arrays = {
            name: tensorstore.open(
                {
                    "driver": "zarr3",
                    "kvstore": {"driver": "file", "path": str(chunks.root / name)},
                    "open": True,
                }
            ).result()
            for name in chunks.variables
        }

    def _reads(self) -> Iterator[Any]:
        for name, start, stop in self._tasks:
            part = self._arrays[name][start * self._steps : stop * self._steps]
            yield part.read()

    def read_epoch(self) -> int:
        """Read every chunk once; the chunks read."""
        waiting: list[Any] = []
        for future in self._reads():
            waiting.append(future)
            if len(waiting) >= self._calls:
                waiting.pop(0).result()
        for future in waiting:
            future.result()
        return self._chunks.count

    def close(self) -> None:
        """Let the arrays go (tensorstore's threads are its own)."""
        self._arrays.clear()
