"""Read slots: never more reads in flight than the target allows, no slot lost to a
cancelled read, and a loader's reads teach its target the store's round trip."""

from __future__ import annotations

import asyncio
from typing import Any

from insitubatch_nodes import build_loader, memory_store
from insitubatch_nodes.core.inflight_target import START, InflightTarget
from insitubatch_nodes.io.reads.fetch_stats import FetchStats
from insitubatch_nodes.io.reads.read_slots import ReadSlots
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.graph import graph_nodes
from tests.helpers.distant_store import Distant


def test_reads_beyond_the_limit_wait_and_cancelled_ones_give_their_slot_back() -> None:
    stats = FetchStats()
    slots = ReadSlots(InflightTarget(cap=3), stats)
    running = 0
    most = 0

    async def read() -> bytes:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            await asyncio.sleep(0.01)
        finally:
            running -= 1
        return b"x" * 100

    async def main() -> None:
        tasks = [asyncio.create_task(slots.run(read)) for _ in range(30)]
        await asyncio.sleep(0.005)
        for task in tasks[1:30:3]:  # some running, most still waiting for a slot
            task.cancel()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        cancelled = sum(isinstance(o, asyncio.CancelledError) for o in outcomes)
        assert cancelled == 10 and outcomes.count(b"x" * 100) == 20
        assert slots.in_flight == 0
        await asyncio.wait_for(slots.run(read), timeout=1)  # every slot is free again

    asyncio.run(main())
    assert most == 3 == stats.most_in_flight
    assert stats.gets == sum(stats.read_latency_counts) >= 21  # the 20 left, then one
    assert stats.bytes_fetched == 100 * stats.gets
    assert stats.slot_wait_ns > 0  # 30 reads for 3 slots: most waited
    median = stats.latency_quantile(0.5)
    assert median is not None and 0.01 / 2**0.25 <= median < 0.05


def test_a_waiting_read_cancelled_just_before_a_slot_frees_is_only_cancelled() -> None:
    """The slot's release passes over the cancelled waiter (dropping it from the queue)
    before the cancelled read runs again: that read must end cancelled, not with an error
    of the queue's own (which a fetch reported as a damaged chunk)."""
    slots = ReadSlots(InflightTarget(cap=1), FetchStats())
    release = asyncio.Event()
    waiting: list[asyncio.Task[bytes]] = []

    async def first_read() -> bytes:
        await release.wait()
        waiting[0].cancel()  # in the same step as this read's release of its slot
        return b"x"

    async def second_read() -> bytes:
        return b"y"

    async def main() -> None:
        first = asyncio.create_task(slots.run(first_read))
        await asyncio.sleep(0)  # first holds the only slot
        waiting.append(asyncio.create_task(slots.run(second_read)))
        await asyncio.sleep(0)  # second waits for it
        release.set()
        assert await first == b"x"
        outcome = await asyncio.gather(waiting[0], return_exceptions=True)
        assert isinstance(outcome[0], asyncio.CancelledError), outcome
        assert slots.in_flight == 0

    asyncio.run(main())


def test_latency_quantiles_come_from_the_histogram_within_a_quarter_octave() -> None:
    stats = FetchStats()
    assert stats.latency_quantile(0.5) is None
    for rtt in [0.001] * 90 + [0.1] * 10:
        stats.add_read(0.0, rtt, 1, 1)
    for q, rtt in ((0.5, 0.001), (0.89, 0.001), (0.95, 0.1), (1.0, 0.1)):
        found = stats.latency_quantile(q)
        assert found is not None and rtt / 2**0.25 <= found <= rtt * 2**0.25
    assert stats.read_ns == int(0.001 * 1e9) * 90 + int(0.1 * 1e9) * 10


def test_a_loader_learns_the_round_trip_of_a_distant_store(memory_url: Any) -> None:
    url, _ = memory_url()
    store = Distant(memory_store(url.removeprefix("memory://")), 0.02)
    loader = build_loader(store, split="all", batch_size=4, block_chunks=4, device="cpu")
    target = next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))
    inflight = target.context.inflight
    assert inflight.limit == START
    for _ in range(2):
        for _ in loader:
            pass
    assert inflight.estimate is not None
    assert 0.02 <= inflight.estimate.min_rtt_s < 0.5
    assert inflight.estimate.rate_bytes_s > 0
    median = target.stats.latency_quantile(0.5)
    assert median is not None and median >= 0.02 / 2**0.25
