"""A store far away: every chunk get waits a fixed delay first (object-store latency)."""

from __future__ import annotations

import asyncio

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore


class Distant(WrapperStore[Store]):
    """Every chunk get waits `delay_s` first, concurrent gets concurrently."""

    def __init__(self, store: Store, delay_s: float) -> None:
        super().__init__(store)
        self.delay_s = delay_s

    def _with_store(self, store: Store) -> Distant:
        return type(self)(store, self.delay_s)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if not key.endswith("zarr.json"):
            await asyncio.sleep(self.delay_s)
        return await self._store.get(key, prototype, byte_range)
