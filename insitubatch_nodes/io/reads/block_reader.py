"""The fetch path's swap point: what reading a block means, and what every reader shares.

A `BlockReader` turns one `ReadPlan` into one block: every chunk the plan lists, decoded
and verified, in its rows of one array per variable: in the memory the caller hands it
(slots the fetch node leased from the context's `BlockSlots`, so that memory is counted
and freed segment by segment), or in memory of its own. Two exist: `io.chunk_reader
.ChunkReader` (numpy blocks, decoded on the CPU) and `device.device_block_reader
.DeviceBlockReader` (tensors, decoded on a device, its fallback a `ChunkReader`).

Lifecycle: the fetch node makes a reader in its event loop's thread at an epoch's first
read (locks and semaphores belong to one loop), awaits `read_block` for each plan, several
at once, and drops the reader with the loop at the epoch's end. Whatever must outlive an
epoch lives in the `ReadContext`, built once per node and shared by every reader it makes,
fallbacks included: opened arrays, shard indexes, the block slots, the counters.

Errors: a read that fails for good is a `ChunkReadError` (a `CorruptChunkError` when the
bytes arrived but are not the chunk) naming the variable, chunk, key and store; arrays
that cannot be opened are an `OSError` naming the store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np
from zarr.abc.store import Store

from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.inflight_target import InflightTarget
from insitubatch_nodes.core.memory_bound import CACHE_QUEUE_BYTES, DEFAULT_MEMORY_BUDGET
from insitubatch_nodes.core.read_plan import ReadPlan
from insitubatch_nodes.core.settings import as_bool, as_int, as_optional_int
from insitubatch_nodes.io.cache.chunk_cache import CacheSpec, ChunkCache
from insitubatch_nodes.io.host.host_resources import HostResources
from insitubatch_nodes.io.metadata.zarr_compat import resolve_pipeline
from insitubatch_nodes.io.reads.block_slots import BlockMemory, BlockSlots
from insitubatch_nodes.io.reads.decode_pool import DecodePool
from insitubatch_nodes.io.reads.fetch_stats import FetchStats
from insitubatch_nodes.io.reads.opened_arrays import OpenedArrays
from insitubatch_nodes.io.reads.retry import RetryPolicy
from insitubatch_nodes.io.reads.shard_reader import ShardIndexes
from insitubatch_nodes.io.stores.open_store import local_root


class BlockReader(Protocol):
    """Reads one plan's chunks into one block (see the module for its lifecycle)."""

    async def read_block(self, plan: ReadPlan, memory: BlockMemory | None) -> dict[str, Any]:
        """The block of `plan`: per variable, an array holding every chunk the plan lists,
        verified: `memory.arrays`, laid out as `memory` says, or arrays of the reader's
        own laid out as the plan's buffer (`plan.buffer_rows[variable]` rows).

        Args:
            plan: what to read, and where each chunk's rows go.
            memory: host memory to decode into, or None. A device reader takes None (its
                blocks live on its device, in memory it allocates).
        """
        ...


@dataclass(frozen=True)
class ReadContext:
    """What every block reader of one fetch node shares, for the node's whole life.

    Build it with `ReadContext.create` (or `ZarrSource.read_context`), which checks the
    settings and makes the shared parts.

    Args:
        store: the zarr store to read.
        layouts: the selected arrays' layouts, by name.
        where: the store as shown in messages (credentials redacted).
        retry: how transient read errors are retried.
        inflight: how many chunk reads to keep under way (self-tuning, within a user's
            `max_inflight` and the memory allowed for reads in flight).
        decode_threads: threads of the decode pool.
        fast_path: whether common layouts are decoded by the library (else all by zarr).
        zarr_pipeline: the codec pipeline class path for arrays zarr decodes, or None.
        stats: the counters every reader updates.
        opened_arrays: the arrays, opened once for every epoch's readers.
        shard_indexes: shard indexes, read once for every epoch's readers.
        block_slots: the memory blocks lease, slot by slot.
        cache: the local chunk cache in front of the store, or None.
        decode_pool: the decode threads (`decode_threads` of them), which the gather
            that draws from these blocks may copy on too (`io.reads.decode_pool`); None:
            each event loop makes its own.
        stores: on a join of several stores, one context per store over its own store
            and variables (`joined`), sharing this one's counters, limits, block slots,
            cache and threads; empty for one store.
    """

    store: Store
    layouts: Mapping[str, VariableLayout]
    where: str
    retry: RetryPolicy
    inflight: InflightTarget
    decode_threads: int
    fast_path: bool
    zarr_pipeline: str | None
    stats: FetchStats
    opened_arrays: OpenedArrays
    shard_indexes: ShardIndexes
    block_slots: BlockSlots
    cache: ChunkCache | None = None
    decode_pool: DecodePool | None = None
    stores: tuple[ReadContext, ...] = ()

    @classmethod
    def create(
        cls,
        store: Store,
        layouts: Mapping[str, VariableLayout],
        *,
        where: str = "the store",
        retry: RetryPolicy | None = None,
        max_inflight: int | None = None,
        decode_threads: int | None = None,
        fast_path: bool = True,
        zarr_pipeline: str | None = None,
        block_memory_bytes: int = DEFAULT_MEMORY_BUDGET,
        inflight_bytes: int | None = None,
        cache: CacheSpec | None = None,
        cache_queue_bytes: int = CACHE_QUEUE_BYTES,
        unit_length: int | None = None,
    ) -> ReadContext:
        """A context with fresh shared parts, its settings checked.

        Args:
            store: the zarr store to read.
            layouts: the selected arrays' layouts, by name.
            where: the store as shown in messages (credentials redacted).
            retry: how transient read errors are retried (default `RetryPolicy()`).
            max_inflight: chunk reads under way at once at most (an int >= 1), or None to
                follow what the store shows (`core.inflight_target`).
            decode_threads: threads of the decode pool (an int >= 1; default this rank's
                share of the host's cores, `HostResources.decode_threads`).
            fast_path: decode common layouts with the library's own decoder.
            zarr_pipeline: `"zarrs"` or a codec pipeline class path for the arrays zarr
                decodes itself, or None for zarr's own.
            block_memory_bytes: memory of blocks alive at once (the shuffle window and
                the read-ahead), at most: the block slots' capacity.
            unit_length: steps per unit of the loader's grid, when it may be shorter than
                a chunk (a fine grid, revisits: `core.unit_grid`): block slots are then
                that short; None for chunk-sized slots.
            inflight_bytes: stored bytes of reads under way at once, at most (the memory
                budget's share for them), or None for no bound but the reads'.
            cache: the chunk cache's folder and size, or None for no cache.
            cache_queue_bytes: stored bytes waiting for the cache's writing thread, at
                most (the memory budget's share for them, `MemoryPlan.cache_queue_bytes`).
        """
        decode_threads = as_optional_int("decode_threads", decode_threads, minimum=1)
        if decode_threads is None:
            decode_threads = HostResources.read().decode_threads()
        return cls(
            store=store,
            layouts=dict(layouts),
            where=where,
            retry=retry or RetryPolicy(),
            inflight=InflightTarget(
                cap=as_optional_int("max_inflight", max_inflight, minimum=1),
                max_bytes=as_optional_int("inflight_bytes", inflight_bytes, minimum=1),
            ),
            decode_threads=decode_threads,
            fast_path=as_bool("fast_path", fast_path),
            zarr_pipeline=resolve_pipeline(zarr_pipeline),
            stats=FetchStats(),
            opened_arrays=OpenedArrays(store),
            shard_indexes=ShardIndexes(),
            block_slots=BlockSlots(
                layouts,
                as_int("block_memory_bytes", block_memory_bytes, minimum=0),
                unit_length=unit_length,
            ),
            cache=None
            if cache is None
            else ChunkCache(cache, as_int("cache_queue_bytes", cache_queue_bytes, minimum=0)),
            decode_pool=DecodePool("fetch", decode_threads),
        )

    def joined(self, stores: Sequence[tuple[Store, str, Sequence[str]]]) -> ReadContext:
        """This context reading each variable from its own store: per store, a context
        over that store and its variables that shares everything else with this one (one
        in-flight target, one memory budget, one cache, one set of counters), so that a
        join reads as one source.

        Args:
            stores: per store, the store, how messages name it (credentials redacted),
                and the selected variables it holds.
        """
        parts = tuple(
            replace(
                self,
                store=store,
                where=where,
                layouts={name: self.layouts[name] for name in names},
                opened_arrays=OpenedArrays(store),
            )
            for store, where, names in stores
        )
        return replace(self, stores=parts)

    @property
    def is_local(self) -> bool:
        """Whether the store (every store of a join) is a local directory (no latency to
        hide by reading ahead)."""
        if self.stores:
            return all(part.is_local for part in self.stores)
        return local_root(self.store) is not None

    def row_nbytes(self, name: str) -> int:
        """Bytes of one row (one step of the sample axis) of variable `name`.

        Args:
            name: a selected variable.
        """
        layout = self.layouts[name]
        return int(np.prod(layout.sample_shape, dtype=np.int64)) * np.dtype(layout.dtype).itemsize
