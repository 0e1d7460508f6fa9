"""A zarr store wrapper that injects the faults object stores really produce.

It wraps any real zarr store (the tests wrap in-memory stores written by zarr-python and
an S3 store on a local S3 server) and fails reads the way object stores do: HTTP 5xx,
timeouts, connection resets, requests that never answer, permanent refusals, corrupt
bytes and objects that are not there. Which reads fail is a pure function of (seed, key,
how often the key was read), so a test run is reproducible. Only chunk reads fail by
default: metadata is read when the loader is built, before any retry policy applies.
"""

from __future__ import annotations

import asyncio
import errno
import zlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import obstore.exceptions
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

METADATA_NAMES = ("zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata")
TRANSIENT_KINDS = ("http-503", "timeout", "connection-reset", "hang")


def transient_error(kind: str) -> Exception:
    """The exception a store raises for `kind` (a hang is injected by never answering)."""
    if kind == "http-503":
        return obstore.exceptions.GenericError(
            "Server returned non-2xx status code: 503 Service Unavailable: SlowDown"
        )
    if kind == "timeout":
        return TimeoutError("request timed out")
    if kind == "connection-reset":
        return ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
    raise ValueError(f"unknown transient kind {kind!r}")


@dataclass
class Faults:
    """What to inject. `transient_rate` is the chance that a read of a chunk fails with one
    of `kinds`; one request (key and byte range) fails at most `max_transient_per_key`
    times in all, so a retry policy with more attempts always gets through."""

    transient_rate: float = 0.0
    kinds: tuple[str, ...] = ("http-503", "timeout", "connection-reset")
    max_transient_per_key: int = 2
    permanent: frozenset[str] = frozenset()
    permanent_error: Exception = field(
        default_factory=lambda: obstore.exceptions.PermissionDeniedError(
            "Server returned non-2xx status code: 403 Forbidden: AccessDenied"
        )
    )
    corrupt: frozenset[str] = frozenset()
    missing: frozenset[str] = frozenset()
    latency_s: float = 0.0
    seed: int = 0


class FaultyStore(WrapperStore[Store]):
    """`store` with `faults` injected into `get`; counts what it injected."""

    def __init__(self, store: Store, faults: Faults | None = None, name: str = "faulty") -> None:
        super().__init__(store)
        self.faults = faults or Faults()
        self.name = name
        self.injected: Counter[str] = Counter()
        self.reads: Counter[str] = Counter()
        self.inflight = 0
        self.most_inflight = 0
        self._failed: Counter[str] = Counter()

    def _with_store(self, store: Store) -> FaultyStore:
        twin = FaultyStore(store, self.faults, self.name)
        twin.injected, twin.reads, twin._failed = self.injected, self.reads, self._failed
        return twin

    def __repr__(self) -> str:
        return f"{self.name}://"

    __str__ = __repr__

    def _draw(self, request: str, salt: str) -> float:
        seen = self.reads[request]
        return zlib.crc32(f"{self.faults.seed}:{request}:{seen}:{salt}".encode()) / 0xFFFFFFFF

    def _transient_kind(self, request: str) -> str | None:
        faults = self.faults
        if self._failed[request] >= faults.max_transient_per_key:
            return None
        if self._draw(request, "fail") >= faults.transient_rate:
            return None
        pick = int(self._draw(request, "kind") * len(faults.kinds)) % len(faults.kinds)
        return faults.kinds[pick]

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if key.rsplit("/", 1)[-1] in METADATA_NAMES:
            return await self._store.get(key, prototype, byte_range)
        request = key if byte_range is None else f"{key}@{byte_range}"
        self.inflight += 1
        self.most_inflight = max(self.most_inflight, self.inflight)
        try:
            return await self._faulty_get(key, request, prototype, byte_range)
        finally:
            self.inflight -= 1
            self.reads[request] += 1

    async def _faulty_get(
        self, key: str, request: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        faults = self.faults
        if faults.latency_s:
            await asyncio.sleep(faults.latency_s)
        if key in faults.missing:
            self.injected["missing"] += 1
            return None
        if key in faults.permanent:
            self.injected["permanent"] += 1
            raise faults.permanent_error
        kind = self._transient_kind(request)
        if kind is not None:
            self._failed[request] += 1
            self.injected[kind] += 1
            if kind == "hang":
                await asyncio.sleep(3600)  # a request that never answers
            raise transient_error(kind)
        found = await self._store.get(key, prototype, byte_range)
        if key in faults.corrupt and found is not None:
            self.injected["corrupt"] += 1
            return prototype.buffer.from_bytes(b"\x00these are not the bytes you stored")
        return found

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]

    def transient_injected(self) -> int:
        return sum(self.injected[kind] for kind in TRANSIENT_KINDS)


def wrap(store: Any, **faults: Any) -> FaultyStore:
    return FaultyStore(store, Faults(**faults))
