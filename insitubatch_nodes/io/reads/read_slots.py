"""ReadSlots: the chunk reads in flight on one event loop, as many as the target says.

A semaphore whose size follows `core.inflight_target.InflightTarget`: each read waits for
a slot, and when it completes its round trip and bytes go to the target, whose `limit`
the next waits see, and to the counters (`FetchStats.add_read`: latency, bytes, waits).
A read given a timeout has it counted from when it holds its slot, the loop's reads
sharing one timer (`io.reads.deadlines`).
Made per event loop (its waiters are that loop's futures); the target is the
`ReadContext`'s, so what one epoch learnt about the store starts the next.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from insitubatch_nodes.core.inflight_target import InflightTarget
from insitubatch_nodes.io.reads.deadlines import Deadlines
from insitubatch_nodes.io.reads.fetch_stats import FetchStats

T = TypeVar("T")


def read_nbytes(found: Any) -> int:
    """Bytes of what a read returned: a zarr `Buffer` or bytes (a get), an array (zarr's
    `getitem`: decoded bytes, the best there is), or None (no object).

    Args:
        found: a read's result.
    """
    if found is None:
        return 0
    nbytes = getattr(found, "nbytes", None)
    return int(nbytes) if nbytes is not None else len(found)


class ReadSlots:
    """At most `target.limit` reads in flight on this loop (see the module).

    Args:
        target: how many reads to keep in flight, fed by every read that completes.
        stats: the counters each completed read is added to (`FetchStats.add_read`).
    """

    def __init__(self, target: InflightTarget, stats: FetchStats) -> None:
        self.target = target
        self.stats = stats
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._deadlines = Deadlines()

    async def run(self, read: Callable[[], Awaitable[T]], timeout_s: float | None = None) -> T:
        """`await read()` once a slot is free; its round trip and bytes feed the target.

        Args:
            read: one try of a read.
            timeout_s: seconds the read may take once it holds its slot, after which it is
                cancelled and `TimeoutError` raised (as `asyncio.timeout` does), or None.
        """
        queued = time.monotonic()
        if self.in_flight < self.target.limit and not self._waiters:
            self.in_flight += 1  # a free slot: no coroutine to wait in
        else:
            await self._acquire()
        try:
            started = time.monotonic()
            in_flight = self.in_flight
            if timeout_s is None:
                found = await read()
            else:
                watch = self._deadlines.watch(timeout_s)
                try:
                    found = await read()
                except BaseException as err:
                    if self._deadlines.drop(watch) and isinstance(err, asyncio.CancelledError):
                        raise TimeoutError from err
                    raise
                self._deadlines.drop(watch)
            finished = time.monotonic()
            nbytes = read_nbytes(found)
            self.target.observe(started, finished, nbytes)
            self.stats.add_read(started - queued, finished - started, nbytes, in_flight)
            return found
        finally:
            self.in_flight -= 1
            self._wake()

    async def _acquire(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # `_wake` counted this read in before waking it
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.in_flight -= 1  # woken and cancelled at once: give the slot on
                self._wake()
            elif waiter in self._waiters:  # `_wake` drops waiters it finds cancelled
                self._waiters.remove(waiter)
            raise

    def _wake(self) -> None:
        """Let waiting reads in, first come first served, while the target allows."""
        while self._waiters and self.in_flight < self.target.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)
