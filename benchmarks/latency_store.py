"""A zarr store that adds a fixed delay to every read: object-store latency on a laptop."""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path
from typing import Any

import obstore.store
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import ObjectStore, WrapperStore

READS = multiprocessing.Value("q", 0)  # forked DataLoader workers share it


class LatencyStore(WrapperStore[Store]):
    """Every `get` waits `latency_s` first (concurrent gets wait concurrently, as on S3),
    and is counted in `READS`."""

    def __init__(self, store: Store, latency_s: float) -> None:
        super().__init__(store)
        self.latency_s = latency_s
        self.path = ""  # where it reads, for re-creating it in a worker process

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        with READS.get_lock():
            READS.value += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return await self._store.get(key, prototype, byte_range)

    def __reduce__(self) -> tuple[Any, ...]:  # DataLoader workers re-create it by path
        return (open_latency_store, (self.path, self.latency_s))


def open_latency_store(path: str, latency_s: float) -> Store:
    """The delaying wrapper over obstore's local store: its gets are native async, as an
    object store's are (zarr's `LocalStore` would read in the loop's default executor,
    which is the loaders' decode pool, and skew the in-flight bound)."""
    local = obstore.store.LocalStore(str(Path(path).resolve()))
    store = LatencyStore(ObjectStore(local, read_only=True), latency_s)
    store.path = path
    return store
