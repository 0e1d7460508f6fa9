"""No fetch thread or event loop outlives the iteration that needed it."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import threading
import time
from typing import Any

import numpy as np
import pytest
import zarr

from insitubatch_nodes import ChunkReadError, ZarrSource, build_loader, memory_store
from tests.helpers import threads

_EARLIER: set[threading.Thread] = set()


@pytest.fixture(autouse=True)
def _threads_of_this_test_only() -> None:
    """Count only threads this test starts. A loader another test dropped mid-epoch (or
    one reading across epochs) stops its threads when it is collected, which a reference
    cycle can put off until the garbage collector runs: collect first, and set aside what
    is still running, so that it is not blamed on this test."""
    _EARLIER.clear()
    _EARLIER.update(threads.threads_left_by_earlier_tests())


def our_threads() -> list[threading.Thread]:
    """Our threads running now that were not running when this test began."""
    return [t for t in threads.our_threads() if t not in _EARLIER]


def _assert_no_threads_left(timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while our_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert our_threads() == []


@pytest.mark.parametrize("device_prefetch", [None, 2])  # 2: a producer thread too
def test_threads_stop_when_an_epoch_ends(memory_url: Any, device_prefetch: int | None) -> None:
    url, _ = memory_url()
    # the least pool (a 1-byte window), so that reads are still under way after a batch
    loader = build_loader(
        url, split="all", batch_size=4, device_prefetch=device_prefetch, shuffle_window=1
    )
    iterator = iter(loader)
    next(iterator)
    assert our_threads(), "the fetch loop should be running mid-epoch"
    for _ in iterator:
        pass
    assert our_threads() == []  # no waiting: stopped by the time the loop ends


def test_the_decode_threads_outlive_the_fetch_loop_while_the_gather_copies_on_them(
    memory_url: Any,
) -> None:
    """The fetch loop stops at the epoch's last block; the pool shuffle then still draws
    batches, whose copies the decode threads help with (`io.reads.decode_pool`): they stop
    with the epoch's last batch instead."""
    url, _ = memory_url()
    loader = build_loader(url, split="all", batch_size=4, device="cpu")
    iterator = iter(loader)
    for _ in range(len(loader) - 1):  # every block is read by the last batch but one
        next(iterator)
    names = [t.name for t in our_threads()]
    assert not any(name.endswith("-loop") for name in names), names
    assert any("-decode" in name for name in names), names
    for _ in iterator:
        pass
    assert our_threads() == []


@pytest.mark.parametrize("device_prefetch", [None, 2])  # 2: a producer thread too
def test_threads_stop_on_break_and_a_new_epoch_starts_cleanly(
    memory_url: Any, device_prefetch: int | None
) -> None:
    url, _ = memory_url()
    loader = build_loader(url, split="all", batch_size=4, device_prefetch=device_prefetch)
    for _ in loader:
        break
    assert our_threads() == []
    assert sum(len(b["sample_index"]) for b in loader) == 88
    assert our_threads() == []


@pytest.mark.parametrize("device_prefetch", [None, 2])  # 2: a producer thread too
def test_threads_stop_when_the_loop_body_raises(
    memory_url: Any, device_prefetch: int | None
) -> None:
    url, _ = memory_url()
    loader = build_loader(url, split="all", batch_size=4, device_prefetch=device_prefetch)
    with pytest.raises(RuntimeError, match="boom"):
        for i, _ in enumerate(loader):
            if i == 2:
                raise RuntimeError("boom")
    assert our_threads() == []


@pytest.mark.parametrize("device_prefetch", [None, 2])  # 2: a producer thread too
def test_threads_stop_on_keyboard_interrupt(memory_url: Any, device_prefetch: int | None) -> None:
    url, _ = memory_url()
    loader = build_loader(url, split="all", batch_size=4, device_prefetch=device_prefetch)
    with pytest.raises(KeyboardInterrupt):
        for _ in loader:
            raise KeyboardInterrupt
    assert our_threads() == []


@pytest.mark.parametrize("device_prefetch", [None, 2])  # 2: a producer thread too
def test_threads_stop_when_the_graph_is_dropped(
    memory_url: Any, device_prefetch: int | None
) -> None:
    url, _ = memory_url()
    loader = build_loader(
        url, split="all", batch_size=4, device_prefetch=device_prefetch, shuffle_window=1
    )
    iterator = iter(loader.root)  # bypass the Loader: only garbage collection can stop it
    next(iterator)
    assert our_threads()
    del iterator, loader
    gc.collect()
    _assert_no_threads_left()


def test_a_failing_read_raises_once_and_stops_the_threads() -> None:
    store = memory_store("threads-corrupt")
    group = zarr.open_group(store, mode="w")
    array = group.create_array(
        "x", shape=(40, 3), chunks=(4, 3), dtype="float32", compressors=zarr.codecs.ZstdCodec()
    )
    array[...] = 1.0
    key = "x/c/5/0"
    backing = store.store  # the obstore MemoryStore behind the zarr store
    import obstore

    obstore.put(backing, key, b"not zstd at all")
    loader = build_loader("memory://threads-corrupt", split="all", batch_size=4)
    with pytest.raises(ChunkReadError, match=r"chunk \(5, 0\) of variable 'x'"):
        list(loader)
    assert our_threads() == []


def _blocks_fetched_after_one(url: str, *, budget: int, max_inflight: int) -> tuple[int, list[int]]:
    """Blocks read once the first is delivered and read-ahead has settled, and the chunk
    reads of each block of the epoch."""
    import time as clock

    from insitubatch_nodes import AsyncFetchNode, Loader
    from tests.helpers.graphs import build_stage

    source = ZarrSource.open(url)
    fetch = AsyncFetchNode(
        build_stage(url, "plan", block_chunks=1),
        source.read_context(max_inflight=max_inflight),
        prefetch_blocks=1,
        memory_budget=budget,
    )
    iterator = iter(Loader(fetch))
    next(iterator)
    deadline = clock.monotonic() + 5
    while fetch.stats.blocks_fetched < 2 and clock.monotonic() < deadline:
        clock.sleep(0.01)
    clock.sleep(0.2)  # let any further read-ahead land
    count = fetch.stats.blocks_fetched
    del iterator
    return count, [plan.num_reads for plan in build_stage(url, "plan", block_chunks=1)]


def test_read_ahead_stays_within_the_memory_budget(memory_url: Any) -> None:
    url, _ = memory_url()
    fetched, _ = _blocks_fetched_after_one(url, budget=1, max_inflight=64)
    assert fetched == 2  # the delivered block + one pending


@pytest.mark.parametrize("max_inflight", [1, 5, 12])
def test_read_ahead_keeps_max_inflight_reads_pending(memory_url: Any, max_inflight: int) -> None:
    """Enough blocks pending to fill every request slot, and no more: further blocks
    would only hold memory and contend for the decode threads."""
    url, _ = memory_url()
    fetched, reads = _blocks_fetched_after_one(url, budget=1 << 30, max_inflight=max_inflight)
    pending = 1  # prefetch_blocks
    while sum(reads[1 : 1 + pending]) < max_inflight:
        pending += 1
    assert fetched == 1 + pending


def test_a_corrupt_local_chunk_file_raises_and_stops_the_threads(tmp_path: Any) -> None:
    path = tmp_path / "corrupt.zarr"
    group = zarr.open_group(str(path), mode="w")
    array = group.create_array(
        "x", shape=(40, 3), chunks=(4, 3), dtype="float32", compressors=zarr.codecs.ZstdCodec()
    )
    array[...] = 1.0
    (path / "x" / "c" / "7" / "0").write_bytes(b"not zstd at all")
    loader = build_loader(str(path), split="all", batch_size=4)
    with pytest.raises(ChunkReadError, match=r"chunk \(7, 0\) of variable 'x'"):
        list(loader)
    assert our_threads() == []


@dataclasses.dataclass
class _Slowness:
    delay_s: float
    chunk_reads: int = 0


class _SlowAfterFirstChunk(zarr.storage.WrapperStore[zarr.abc.store.Store]):
    """Every chunk read after the first takes `slowness.delay_s` (metadata reads do not)."""

    def __init__(self, store: zarr.abc.store.Store, slowness: _Slowness) -> None:
        super().__init__(store)
        self.slowness = slowness

    def _with_store(self, store: zarr.abc.store.Store) -> _SlowAfterFirstChunk:
        return _SlowAfterFirstChunk(store, self.slowness)

    async def get(self, key: str, prototype: Any, byte_range: Any = None) -> Any:
        if "/c/" in key:
            self.slowness.chunk_reads += 1
            if self.slowness.chunk_reads > 1:
                await asyncio.sleep(self.slowness.delay_s)
        return await self._store.get(key, prototype, byte_range)


@pytest.mark.parametrize("device_prefetch", [None, 2])  # 2: a producer thread too
def test_closing_does_not_wait_out_a_slow_read(device_prefetch: int | None) -> None:
    """A producer thread waiting on a read that takes a minute stops at once on close(),
    and going on afterwards yields exactly the rest of the epoch."""
    store = memory_store("threads-slow")
    group = zarr.open_group(store, mode="w")
    group.create_array("x", shape=(32, 3), chunks=(4, 3), dtype="float32")[...] = np.arange(
        96, dtype="float32"
    ).reshape(32, 3)

    slowness = _Slowness(delay_s=60.0)

    def loader(source: Any) -> Any:
        return build_loader(
            source,
            split="all",
            batch_size=4,
            block_chunks=1,
            max_inflight=1,  # block 0's read is the first chunk read
            device_prefetch=device_prefetch,
            shuffle="block",  # the first batch needs block 0 only (a pool waits for P units)
        )

    expected = [batch["sample_index"].tolist() for batch in loader(store)]
    slow = loader(_SlowAfterFirstChunk(store, slowness))
    iterator = iter(slow)
    first = next(iterator)["sample_index"].tolist()
    time.sleep(0.2)  # the producer thread, if any, is now waiting on the slow read
    began = time.monotonic()
    slow.close()
    assert time.monotonic() - began < 5.0
    _assert_no_threads_left()
    slowness.delay_s = 0.0  # the store recovers: going on reads the rest
    rest = [batch["sample_index"].tolist() for batch in iterator]
    assert [first, *rest] == expected
    _assert_no_threads_left()
