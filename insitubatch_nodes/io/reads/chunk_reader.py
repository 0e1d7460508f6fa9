"""Read a block's chunks inside the fetch event loop, decoding them on the CPU.

Two paths, chosen per array once:

- the library's own: stored bytes fetched by `stored_chunks` (plain files, gets, shard
  ranges) and decoded by numcodecs straight into the block buffer in the decode pool,
  several chunks per thread hop, starting while other reads are still in flight;
- zarr: `AsyncArray.getitem` per chunk, for layouts we do not decode ourselves (filters,
  F order, codecs the codec table does not know, nested sharding: `stored_array` says
  which and why), through the named codec pipeline if any.
  zarr decodes in the loop's default executor too.

Arrays are opened by the first read, inside the loop they belong to.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import numpy as np
import zarr

from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.read_plan import ChunkRead, ReadPlan, chunk_regions
from insitubatch_nodes.io.metadata.zarr_compat import pipeline_can_read, stored_object_key
from insitubatch_nodes.io.reads.block_reader import ReadContext
from insitubatch_nodes.io.reads.block_slots import BlockMemory
from insitubatch_nodes.io.reads.help_board import HelpBoard
from insitubatch_nodes.io.reads.retry import ReadGaveUp
from insitubatch_nodes.io.reads.shard_reader import Loaded
from insitubatch_nodes.io.reads.stored_array import ChunkSink, StoredArray, stored_array
from insitubatch_nodes.io.reads.stored_chunks import ChunkFetcher, first_failure
from insitubatch_nodes.io.stores.redact import scrubbed
from insitubatch_nodes.io.stores.store_errors import first_line

AsyncArray = zarr.AsyncArray  # type: ignore[type-arg]


class ChunkReader:
    """A `BlockReader` whose blocks are numpy arrays decoded on the CPU (see the module).

    Args:
        context: what every reader of the fetch node shares (`block_reader.ReadContext`).
        layouts: the variables this reader reads, if not all of the context's (a device
            reader's fallback reads those the device cannot decode).
        fetcher: the byte fetch to share with another reader of the same loop (a device
            reader's, so that one in-flight limit covers both), or None for its own.
        count_blocks: whether each block read counts as a block fetched (not when it
            is one store's part of a join's block: `io.reads.joined_reader`).
    """

    def __init__(
        self,
        context: ReadContext,
        layouts: Mapping[str, VariableLayout] | None = None,
        fetcher: ChunkFetcher | None = None,
        *,
        count_blocks: bool = True,
    ) -> None:
        self._context = context
        self._count_blocks = count_blocks
        self._layouts = dict(context.layouts if layouts is None else layouts)
        self._fetcher = fetcher or ChunkFetcher(context)
        self._stored: dict[str, StoredArray] = {}  # what the library decodes
        self._via_zarr: dict[str, AsyncArray] = {}  # what zarr decodes
        self._opened = False
        self._opening: asyncio.Lock | None = None

    async def _ready(self) -> None:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if not self._opened:
                context = self._context
                try:
                    await context.retry.call(
                        self._open_arrays, "zarr metadata", context.stats.count_retry
                    )
                except ReadGaveUp as gave_up:
                    cause = gave_up.__cause__
                    assert cause is not None
                    raise OSError(
                        f"opening the arrays of {context.where} failed {gave_up}: "
                        f"{type(cause).__name__}: {first_line(cause)}"
                    ) from scrubbed(cause)
                self._opened = True

    async def _open_arrays(self) -> None:
        names = list(self._layouts)
        found = await self._context.opened_arrays.open(names)
        pipeline = self._context.zarr_pipeline
        rerouted = []
        for name, array in zip(names, found, strict=True):
            stored = stored_array(name, array) if self._context.fast_path else None
            if isinstance(stored, StoredArray):
                self._stored[name] = stored
            elif pipeline is not None and pipeline_can_read(pipeline, array.metadata):
                rerouted.append(name)  # zarr decodes it, through the named pipeline
            else:
                self._via_zarr[name] = array
        if rerouted:
            through = await self._context.opened_arrays.open(rerouted, pipeline)
            self._via_zarr.update(zip(rerouted, through, strict=True))

    async def read_block(self, plan: ReadPlan, memory: BlockMemory | None) -> dict[str, np.ndarray]:
        """See `BlockReader.read_block`.

        Args:
            plan: what to read, and where each chunk's rows go.
            memory: memory to decode into (leased slots), or None for buffers of its own.
        """
        await self._ready()
        if memory is None:
            memory = BlockMemory.own(plan, self._layouts)
        stored = {self._stored[n]: reads for n, reads in plan.reads.items() if n in self._stored}
        try:
            async with asyncio.TaskGroup() as group:
                if stored:
                    group.create_task(
                        self._fetcher.fetch(stored, self._decoding(memory), plan.assignment.epoch)
                    )
                for name, reads in plan.reads.items():
                    if name in self._via_zarr:
                        for read in reads:
                            group.create_task(self._read_via_zarr(name, read, memory))
        except BaseExceptionGroup as failures:
            raise first_failure(failures) from None  # the error itself, not a wrapper
        if self._count_blocks:
            self._context.stats.add(blocks_fetched=1)
        return {name: memory.arrays[name] for name in plan.reads}

    def _decoding(self, memory: BlockMemory) -> ChunkSink:
        """The sink that decodes fetched chunks into their rows of `memory`."""
        layouts = self._layouts
        stats = self._context.stats
        pool = self._context.decode_pool
        board = HelpBoard() if pool is None else pool.board

        def decode(array: StoredArray, items: Loaded) -> None:
            started = time.thread_time_ns()
            decoded = helping = 0
            for read, data in items:
                helping += board.lend_a_hand()  # the gather's copies (`io.reads.help_board`)
                target, keep = chunk_regions(layouts[array.name], read)
                destination = memory.region(array.name, target)
                try:
                    array.decoder.decode_into(data, destination, keep)
                except Exception as err:
                    key = array.key(read.coords)
                    raise self._fetcher.error(array.name, read.coords, key, err) from scrubbed(err)
                decoded += destination.nbytes
            stats.add(
                bytes_decoded=int(decoded),
                chunks_read=len(items),
                fast_path_chunks=len(items),
                decode_cpu_ns=time.thread_time_ns() - started - helping,
            )

        return decode

    async def _read_via_zarr(self, name: str, read: ChunkRead, memory: BlockMemory) -> None:
        array = self._via_zarr[name]
        target, keep = chunk_regions(self._layouts[name], read)
        selection = self._layouts[name].chunk_selection(read.coords)
        key = stored_object_key(array.metadata, array.store_path.path, selection)
        try:
            data = await self._fetcher.with_retries(lambda: array.getitem(selection), key)
        except Exception as err:
            raise self._fetcher.error(name, read.coords, key, err) from scrubbed(err)
        destination = memory.region(name, target)
        destination[...] = np.asarray(data)[keep]  # zarr returns the chunk's valid region
        self._context.stats.add(chunks_read=1, bytes_decoded=int(destination.nbytes))
