"""A zarr store that adds a fixed delay to every read: object-store latency on a laptop."""

from __future__ import annotations

import asyncio
import multiprocessing
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import LocalStore, WrapperStore

READS = multiprocessing.Value("q", 0)  # forked DataLoader workers share it


class LatencyStore(WrapperStore[Store]):
    """Every `get` waits `latency_s` first (concurrent gets wait concurrently, as on S3),
    and is counted in `READS`."""

    def __init__(self, store: Store, latency_s: float) -> None:
        super().__init__(store)
        self.latency_s = latency_s

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        with READS.get_lock():
            READS.value += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return await self._store.get(key, prototype, byte_range)

    def __reduce__(self) -> tuple[Any, ...]:  # DataLoader workers re-create it by path
        return (open_latency_store, (str(self._store.root), self.latency_s))  # type: ignore[attr-defined]


def open_latency_store(path: str, latency_s: float) -> Store:
    return LatencyStore(LocalStore(path, read_only=True), latency_s)
