"""AsyncFetchNode: reads planned blocks ahead on one event loop, yields them in plan order.

Plans are pulled from the source in the caller's thread (they are cheap), and their reads
run on the loop while the caller works on earlier blocks. The loop starts with the first
`next()` after a reset (so a reset that only restores an end-of-epoch state, or a
`state_dict()` call, reads nothing) and stops when the epoch's last block is out, on
`reset`, on `close`, on error and when the node is garbage collected. Each pending block
remembers the source state right after its plan was pulled; the node's state is that of
the last block it handed out, so blocks read ahead but not yet delivered are simply read
again on resume. For the same reason, `close()` in the middle of an epoch loses nothing:
the next `next()` rewinds the source to the last delivered block and reads on from there.
Block memory (`io.reads.block_slots`) stays allocated from one epoch to the next (`end_epoch`,
which `Loader` calls at an epoch's end), so its pages are faulted in once per loader, not
once per epoch; `close()` lets it go.

With `read_across_epochs`, reading goes on past the end of an epoch: once the source is
exhausted, the node resets it into the next epoch (what the next `reset(None)` would do)
and reads that epoch's first blocks while the consumer still draws the last batches of
this one; the next `reset(None)` adopts them. Without it, every epoch's first batch waits
for a whole block to be read and decoded (40-54 ms per epoch for ERA5-shaped zstd
blocks on two cores). A `reset` with a state, or `close()`, drops what was read ahead.
"""

from __future__ import annotations

import concurrent.futures
import copy
import dataclasses
import os
import weakref
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.memory_bound import sample_nbytes
from insitubatch_nodes.core.read_plan import ReadPlan, chunk_rows_read
from insitubatch_nodes.core.settings import as_bool, as_int
from insitubatch_nodes.device.device_block_reader import DeviceBlockReader
from insitubatch_nodes.io.host.fork_guard import check_same_process
from insitubatch_nodes.io.reads.block_reader import BlockReader, ReadContext
from insitubatch_nodes.io.reads.block_slots import BlockMemory
from insitubatch_nodes.io.reads.event_loop import EventLoopThread
from insitubatch_nodes.io.reads.joined_reader import cpu_reader
from insitubatch_nodes.nodes import state_names
from insitubatch_nodes.nodes.items import FetchedBlock
from insitubatch_nodes.nodes.state_checks import named_state, source_part
from insitubatch_nodes.nodes.state_views import snapshot, state_reader


@dataclass(frozen=True)
class _Pending:
    future: concurrent.futures.Future[FetchedBlock]
    source_state: dict[str, Any]
    reads: int
    nbytes: int
    next_epoch: bool = False  # read ahead for the epoch after the current one


class AsyncFetchNode(BaseNode[FetchedBlock]):
    """Reads ahead until `context.inflight.limit` chunk reads (and at least `prefetch_blocks`
    blocks) are pending, enough to keep every request slot busy (more only adds contention
    and memory: with 2.8 MB chunks, twice as much read-ahead cut throughput under 30 ms
    reads by 40%), never holding more than `memory_budget` bytes of pending blocks (one
    block is always allowed, however large). How blocks are read (store, retries, in-flight
    limit, decode threads, codec pipeline) is the `ReadContext`'s, shared by every epoch's
    reader; `context.stats` counts what was read and retried. A host block's memory is
    leased from `context.block_slots` as its plan is submitted, and goes back when the
    block is dropped (`io.reads.block_slots`). With `decode_on` a device,
    blocks are decoded into tensors there (`device.device_block_reader`).
    `read_across_epochs`: see the module's docstring; the loop then stays up between
    epochs (`Loader` leaves it running when an epoch ends), until the next epoch,
    `close()`, or garbage collection.

    Args:
        source: the read plans (`ReadPlanNode`).
        context: how to read (`ReadContext.create(...)` or `ZarrSource.read_context(...)`).
        prefetch_blocks: blocks read ahead at least (an int >= 1).
        memory_budget: bytes of pending blocks at most (an int >= 1).
        decode_on: a device to decode blocks on, None for the host.
        read_across_epochs: read the next epoch's first blocks at an epoch's end (True or
            False).
    """

    STATE_NAME = state_names.ASYNC_FETCH
    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[ReadPlan],
        context: ReadContext,
        *,
        prefetch_blocks: int = 2,
        memory_budget: int = 1 << 30,
        decode_on: torch.device | None = None,
        read_across_epochs: bool = False,
    ) -> None:
        super().__init__()
        if decode_on is not None and context.stores:
            raise ValueError(
                f"decode_on={decode_on} decodes chunks on the device, which a join of several "
                f"stores does not do yet (its blocks are read store by store on the CPU); "
                f"pass decode_on=None"
            )
        self.source = source
        self._read_source_state = state_reader(source)  # kept states: no copy per pull
        self.context = context
        self.prefetch_blocks = as_int("prefetch_blocks", prefetch_blocks, minimum=1)
        self.memory_budget = as_int("memory_budget", memory_budget, minimum=1)
        self.decode_on = decode_on
        self.read_across_epochs = as_bool("read_across_epochs", read_across_epochs)
        self.stats = context.stats
        self._epoch_start = context.stats.snapshot()  # what `stage_counters` counts from
        self._chunk_bytes = (0, 0)  # delivered this epoch: whole chunks read, rows kept
        self._row_nbytes = {name: context.row_nbytes(name) for name in context.layouts}
        self._local = context.is_local
        self._owner_pid = os.getpid()
        self._runtime: EventLoopThread | None = None
        self._reader: BlockReader | None = None
        self._finalizer: weakref.finalize | None = None
        self._pending: deque[_Pending] = deque()
        self._held: tuple[ReadPlan, dict[str, Any]] | None = None  # pulled, over budget
        self._source_done = False
        self._delivered_source_state: dict[str, Any] = {}
        self._source_ahead = False  # pulled plans were dropped by close(): rewind first
        # The source's state at the start of the next epoch, once read-ahead reset it there
        # (its plans are then the next epoch's); None while it is in the current epoch.
        self._next_start: dict[str, Any] | None = None
        self._waiting_on: concurrent.futures.Future[FetchedBlock] | None = None
        self._interrupted = False

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        check_same_process(self._owner_pid)
        super().reset(initial_state)
        self._epoch_start = self.stats.snapshot()
        self._chunk_bytes = (0, 0)
        if initial_state is None and self._next_start is not None:
            self._adopt_next_epoch()
            return
        self._stop()
        if initial_state is None and self._source_ahead:
            self._rewind_source()  # the source may have been reset into the next epoch
        self.source.reset(source_part(self, initial_state, self.SOURCE_KEY))
        self._delivered_source_state = self.source.state_dict()
        self._source_done = False
        self._source_ahead = False
        self._held = None

    def interrupt(self) -> None:
        """Make a `next()` waiting on a read give up now, from any thread (the one method
        that may be called while another thread is inside this node): a producer thread
        pulling through this node then stops at once instead of waiting out a slow read.
        `close()` still has to follow; the block given up is read again by the next
        `next()`, as after `close()`."""
        self._interrupted = True
        waiting = self._waiting_on
        if waiting is not None:
            waiting.cancel()

    def _adopt_next_epoch(self) -> None:
        """The next epoch begins with what was read ahead for it: the source is already
        there, so it is left as it is."""
        for pending in self._pending:
            if not pending.next_epoch:  # an epoch left before its end
                pending.future.cancel()
        self._pending = deque(
            dataclasses.replace(p, next_epoch=False) for p in self._pending if p.next_epoch
        )
        assert self._next_start is not None
        self._delivered_source_state = self._next_start
        self._next_start = None
        # An epoch read ahead to its end left the source exhausted: the next pull finds
        # that again, and moves on into the epoch after.
        self._source_done = False

    def close(self) -> None:
        """Stop the event loop and its threads, and let the block memory go; safe to call
        at any time, any number of times."""
        self._stop()
        self.context.block_slots.clear()

    def end_epoch(self) -> None:
        """Stop the event loop and its threads at an epoch's end (what `Loader` calls),
        keeping the block memory's pages for the next epoch: a pool shuffle's window
        (1 GiB by default) would otherwise be allocated and page-faulted in afresh every
        epoch, which cost it a tenth of its throughput. The memory stays within the
        budget, and goes back on `close()`."""
        self._stop()

    def _stop(self) -> None:
        """Cancel what is read ahead and stop the loop; the block memory stays, and what the
        chunk cache queued is written and sealed."""
        self._interrupted = False
        if self._pending or self._held is not None or self._next_start is not None:
            self._source_ahead = True
        self._next_start = None
        for pending in self._pending:
            pending.future.cancel()
        self._pending.clear()
        self._held = None
        if self._finalizer is not None:
            self._finalizer()  # runs EventLoopThread.close once
            self._finalizer = None
        if self.context.cache is not None:
            # the decode threads are joined: what they queued is written and sealed, and
            # the cache's writing thread ends with the loop's (the next run reuses them)
            self.context.cache.seal()
        self._runtime = None
        self._reader = None

    def _start(self) -> None:
        runtime = EventLoopThread(
            "fetch",
            self.context.decode_threads,
            on_busy=self.stats.count_loop_busy,
            pool=self.context.decode_pool,
        )
        self._runtime = runtime
        if self.decode_on is None:
            self._reader = cpu_reader(self.context)
        else:
            self._reader = DeviceBlockReader(self.context, self.decode_on)
        self._finalizer = weakref.finalize(self, runtime.close)

    def _wants_more(self) -> bool:
        if len(self._pending) < self.prefetch_blocks:
            return True
        if self._local:  # no latency to hide: the decode threads are the parallelism
            return False
        return sum(p.reads for p in self._pending) < self.context.inflight.limit

    def _rewind_source(self) -> None:
        """Put the source back where the last delivered block left it, after a close()
        dropped blocks read ahead of it."""
        self.source.reset(copy.deepcopy(self._delivered_source_state))
        self._source_done = False
        self._source_ahead = False

    def _read_ahead(self) -> None:
        if self._source_ahead:
            self._rewind_source()
        while self._wants_more():
            if self._held is None:
                if self._source_done:
                    return
                try:
                    plan = next(self.source)
                except StopIteration:
                    if self.read_across_epochs and self._next_start is None:
                        self.source.reset(None)
                        self._next_start = copy.deepcopy(self.source.state_dict())
                        continue
                    self._source_done = True
                    return
                self._held = (plan, self._read_source_state())
            plan, state = self._held
            nbytes = sum(rows * self._row_nbytes[n] for n, rows in plan.buffer_rows.items())
            pending_bytes = sum(p.nbytes for p in self._pending)
            if self._pending and pending_bytes + nbytes > self.memory_budget:
                return  # submitted once earlier blocks are handed out
            self._held = None
            if self._runtime is None:
                self._start()
            assert self._runtime is not None and self._reader is not None
            memory = None if self.decode_on is not None else self.context.block_slots.lease(plan)
            future = self._runtime.submit(self._fetch(self._reader, plan, memory, self.decode_on))
            self._pending.append(
                _Pending(future, state, plan.num_reads, nbytes, self._next_start is not None)
            )

    @staticmethod
    async def _fetch(
        reader: BlockReader,
        plan: ReadPlan,
        memory: BlockMemory | None,
        device: torch.device | None,
    ) -> FetchedBlock:
        """A static method: a coroutine holding the node would keep it (and its loop
        thread) alive while reads are pending."""
        return FetchedBlock(plan, await reader.read_block(plan, memory), device, memory)

    def next(self) -> FetchedBlock:
        check_same_process(self._owner_pid)
        self._read_ahead()
        if not self._pending or self._pending[0].next_epoch:
            if not self._pending:
                self._stop()
            raise StopIteration  # the rest was read ahead for the next epoch
        pending = self._pending.popleft()
        self._waiting_on = pending.future
        if self._interrupted:  # interrupt() came before the wait began
            pending.future.cancel()
        try:
            block = pending.future.result()
        except BaseException:
            self._stop()
            self._source_ahead = True  # a caller that goes on gets this block read again
            raise
        finally:
            self._waiting_on = None
        self._delivered_source_state = pending.source_state
        decoded, kept = chunk_rows_read(block.plan, self.context.layouts)
        self._chunk_bytes = (self._chunk_bytes[0] + decoded, self._chunk_bytes[1] + kept)
        self._read_ahead()
        if not self._pending:
            self._stop()  # that was the last block: no IO left to do
        return block.without_chunk_reads()  # its chunk reads are done: let them go young

    def stage_counters(self) -> dict[str, Any]:
        """This epoch's reads so far, by `core.stage_report.EpochActivity`'s names (what
        `Loader.stats()` reports)."""
        now, then = self.stats.snapshot(), self._epoch_start
        counts = [
            a - b for a, b in zip(now.read_latency_counts, then.read_latency_counts, strict=True)
        ]
        quantiles = [now.latency_quantile(q, counts) for q in (0.5, 0.9, 0.99)]
        least = now.latency_quantile(0.0, counts)
        estimate = self.context.inflight.estimate
        return {
            "sample_bytes": sample_nbytes(self.context.layouts),
            "chunks_read": now.chunks_read - then.chunks_read,
            "bytes_fetched": now.bytes_fetched - then.bytes_fetched,
            "bytes_decoded": now.bytes_decoded - then.bytes_decoded,
            "gets": now.gets - then.gets,
            "read_s": (now.read_ns - then.read_ns) / 1e9,
            "slot_wait_s": (now.slot_wait_ns - then.slot_wait_ns) / 1e9,
            "most_in_flight": now.most_in_flight,  # since the node was built
            "inflight_limit": self.context.inflight.limit,
            "min_rtt_s": None if estimate is None else estimate.min_rtt_s,
            "latency_s": None if quantiles[0] is None else tuple(quantiles),
            "least_latency_s": least,
            "loop_busy_s": (now.loop_busy_ns - then.loop_busy_ns) / 1e9,
            "retries": now.retries - then.retries,
            "decode_cpu_s": (now.decode_cpu_ns - then.decode_cpu_ns) / 1e9,
            "decode_threads": self.context.decode_threads,
            "memory_held_bytes": self.context.block_slots.leased_bytes,
            "memory_allowed_bytes": self.context.block_slots.capacity_bytes,
            "cache_hits": now.cache_hits - then.cache_hits,
            "cache_misses": now.cache_misses - then.cache_misses,
            "cache_bytes_served": now.cache_bytes_served - then.cache_bytes_served,
            "cache_bytes_written": now.cache_bytes_written - then.cache_bytes_written,
            "chunk_bytes_decoded": self._chunk_bytes[0],
            "chunk_bytes_kept": self._chunk_bytes[1],
        }

    def get_state(self) -> dict[str, Any]:
        return snapshot(self.state_view())

    def state_view(self) -> dict[str, Any]:
        """The state without a copy, for a node downstream to keep unchanged
        (`nodes.state_views`)."""
        return named_state(self, {self.SOURCE_KEY: self._delivered_source_state})
