"""A zarr store that adds a fixed delay to every read: object-store latency on a laptop."""

from __future__ import annotations

import asyncio
import multiprocessing
from pathlib import Path
from typing import Any

import obstore.store
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.storage import LocalStore, MemoryStore, ObjectStore, WrapperStore

READS = multiprocessing.Value("q", 0)  # forked DataLoader workers share it


class LatencyStore(WrapperStore[Store]):
    """Every `get` waits `latency_s` first (concurrent gets wait concurrently, as on S3),
    and is counted in `READS`."""

    def __init__(
        self,
        store: Store,
        latency_s: float,
        path: str,
        forks: bool,
        bandwidth_bytes_s: float | None = None,
    ) -> None:
        super().__init__(store)
        self.latency_s = latency_s
        self.path, self.forks = path, forks  # to re-create it in a worker process
        self.bandwidth_bytes_s = bandwidth_bytes_s
        self._link_free = 0.0  # when the link has carried every reply sent so far

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        with READS.get_lock():
            READS.value += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        found = await self._store.get(key, prototype, byte_range)
        if self.bandwidth_bytes_s and found is not None:  # replies cross one link in turn
            now = asyncio.get_running_loop().time()
            self._link_free = max(now, self._link_free) + len(found) / self.bandwidth_bytes_s
            await asyncio.sleep(self._link_free - now)
        return found

    def __reduce__(self) -> tuple[Any, ...]:  # DataLoader workers re-create it by path
        return (
            open_latency_store,
            (self.path, self.latency_s, self.forks, self.bandwidth_bytes_s),
        )


def open_latency_store(
    path: str, latency_s: float, forks: bool = False, bandwidth_bytes_s: float | None = None
) -> Store:
    """The delaying wrapper over obstore's local store, whose gets are native async as an
    object store's are (zarr's `LocalStore` reads in the loop's default executor, which
    for the async loaders is their decode pool, and would skew their in-flight bound).
    `forks`: for loaders whose DataLoader forks workers, where obstore hangs; they read
    through zarr's `LocalStore` (their own threads), with the same delay.
    `bandwidth_bytes_s`: replies also cross one link of that rate, one after another (a
    store behind a capped connection), in this process."""
    if forks:
        inner: Store = LocalStore(path, read_only=True)
    else:
        inner = ObjectStore(obstore.store.LocalStore(str(Path(path).resolve())), read_only=True)
    return LatencyStore(inner, latency_s, path, forks, bandwidth_bytes_s)


async def memory_copy(path: Path | str) -> MemoryStore:
    """A read-only copy in memory of the local store at `path`: with `LatencyStore` over
    it, an object store whose client costs next to no CPU (pure asyncio, no native
    threads), so what a loader spends per get is its own.

    Args:
        path: the local store's directory.
    """
    local = LocalStore(str(path), read_only=True)
    copied: dict[str, Buffer] = {}
    writable = MemoryStore(copied)
    prototype = default_buffer_prototype()
    async for key in local.list():
        found = await local.get(key, prototype)
        assert found is not None
        await writable.set(key, found)
    return MemoryStore(copied, read_only=True)
