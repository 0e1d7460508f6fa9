"""A store far away: every chunk get waits a fixed delay first (object-store latency),
and optionally crosses a link of capped bandwidth or costs this process CPU."""

from __future__ import annotations

import asyncio
import time

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore


class Distant(WrapperStore[Store]):
    """Every chunk get waits `delay_s` first, concurrent gets concurrently.

    `bandwidth_bytes_s`: replies then cross one link of that rate, one after another (a
    store behind a capped connection: reads queue on the link). `cpu_s`: each chunk get
    then keeps the event loop's thread busy that long (Python work per read: reads queue
    in this process)."""

    def __init__(
        self,
        store: Store,
        delay_s: float,
        *,
        bandwidth_bytes_s: float | None = None,
        cpu_s: float = 0.0,
    ) -> None:
        super().__init__(store)
        self.delay_s = delay_s
        self.bandwidth_bytes_s = bandwidth_bytes_s
        self.cpu_s = cpu_s
        self._link_free = 0.0  # when the link has carried every reply sent so far

    def _with_store(self, store: Store) -> Distant:
        return type(self)(
            store, self.delay_s, bandwidth_bytes_s=self.bandwidth_bytes_s, cpu_s=self.cpu_s
        )

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if key.endswith("zarr.json"):
            return await self._store.get(key, prototype, byte_range)
        await asyncio.sleep(self.delay_s)
        found = await self._store.get(key, prototype, byte_range)
        if self.bandwidth_bytes_s and found is not None:
            now = asyncio.get_running_loop().time()
            self._link_free = max(now, self._link_free) + len(found) / self.bandwidth_bytes_s
            await asyncio.sleep(self._link_free - now)
        busy_until = time.thread_time() + self.cpu_s
        while time.thread_time() < busy_until:
            pass
        return found
