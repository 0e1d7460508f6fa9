"""Read a block's chunks through zarr inside the fetch event loop.

Lives in the loop thread: arrays and the in-flight semaphore are created lazily by the
first read, inside the running loop they belong to. zarr decodes in the loop's default
executor (the decode pool), so the loop itself only schedules.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import zarr.api.asynchronous
from zarr.abc.store import Store

from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.read_plan import ChunkRead, ReadPlan


class ChunkReadError(OSError):
    """A chunk could not be read or decoded; names the array, the chunk and the store."""


@dataclass
class FetchStats:
    """Running totals, updated from the loop thread and read from anywhere."""

    chunks_read: int = 0
    bytes_decoded: int = 0
    blocks_fetched: int = 0


class ChunkReader:
    def __init__(
        self,
        store: Store,
        layouts: Mapping[str, VariableLayout],
        *,
        max_inflight: int,
        where: str,
        stats: FetchStats,
    ) -> None:
        self._store = store
        self._layouts = dict(layouts)
        self._max_inflight = max_inflight
        self._where = where
        self._stats = stats
        self._arrays: dict[str, zarr.AsyncArray] | None = None  # type: ignore[type-arg]
        self._inflight: asyncio.Semaphore | None = None
        self._opening: asyncio.Lock | None = None

    async def _ready(self) -> dict[str, zarr.AsyncArray]:  # type: ignore[type-arg]
        if self._opening is None:
            self._opening = asyncio.Lock()
            self._inflight = asyncio.Semaphore(self._max_inflight)
        async with self._opening:
            if self._arrays is None:
                group = await zarr.api.asynchronous.open_group(store=self._store, mode="r")
                arrays = {}
                for name in self._layouts:
                    arrays[name] = await group.getitem(name)
                self._arrays = arrays  # type: ignore[assignment]
        assert self._arrays is not None
        return self._arrays

    async def read_block(self, plan: ReadPlan) -> dict[str, np.ndarray]:
        arrays = await self._ready()
        buffers = {
            name: np.empty((plan.num_samples, *layout.sample_shape), dtype=layout.dtype)
            for name, layout in self._layouts.items()
        }
        try:
            async with asyncio.TaskGroup() as group:
                for name, reads in plan.reads.items():
                    for read in reads:
                        group.create_task(self._read_chunk(name, arrays[name], read, buffers[name]))
        except BaseExceptionGroup as failures:
            raise failures.exceptions[0] from None  # the first failure, not a wrapper
        self._stats.blocks_fetched += 1
        return buffers

    async def _read_chunk(
        self,
        name: str,
        array: zarr.AsyncArray,  # type: ignore[type-arg]
        read: ChunkRead,
        buffer: np.ndarray,
    ) -> None:
        layout = self._layouts[name]
        selection = layout.chunk_selection(read.coords)
        assert self._inflight is not None
        try:
            async with self._inflight:
                data = await array.getitem(selection)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            raise ChunkReadError(
                f"reading chunk {read.coords} of variable {name!r} from {self._where} failed: "
                f"{type(err).__name__}: {err}"
            ) from err
        rows = selection[0].stop - selection[0].start
        buffer[(slice(read.dest_row, read.dest_row + rows), *selection[1:])] = data
        self._stats.chunks_read += 1
        self._stats.bytes_decoded += int(np.asarray(data).nbytes)
