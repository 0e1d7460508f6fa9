"""One asyncio event loop on a daemon thread, with a decode thread pool as its default
executor.

The loop holds the pool (`io.reads.decode_pool`) from its start to its stop, and stopping
never waits forever: all IO parallelism of the library lives here, so shutting this down
is what "no thread left behind" means; the pool's threads stop with the loop unless the
gather still copies on them, and then with the gather's epoch.

The loop can also say how busy it is (`on_busy`): the time it spends between waits for
IO, running callbacks or waiting for the GIL, is the Python work per read. When reads take
longer than the store's round trip, that figure tells a queue in this process (a loop busy
all the time) from one on the link (a loop mostly waiting): `core.stage_report`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import selectors
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from insitubatch_nodes.io.host.threads import STOP_TIMEOUT_S, THREAD_PREFIX
from insitubatch_nodes.io.reads.decode_pool import DecodePool

T = TypeVar("T")


class _TimedSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The platform's selector, adding up the time the loop spends between its waits (and
    in waits that could not block: work was ready) and handing it to `on_busy`, in
    nanoseconds, once it reaches `REPORT_NS` (one call per millisecond of work at most,
    not one per iteration)."""

    REPORT_NS = 1_000_000

    def __init__(self, on_busy: Callable[[int], None]) -> None:
        super().__init__()
        self._on_busy = on_busy
        self._since = time.perf_counter_ns()
        self._unreported = 0

    def select(self, timeout: float | None = None) -> list[Any]:
        started = time.perf_counter_ns()
        try:
            return super().select(timeout)
        finally:
            ended = time.perf_counter_ns()
            busy = started - self._since
            if timeout is not None and timeout <= 0:  # callbacks were ready: no idling
                busy += ended - started
            self._since = ended
            self._unreported += busy
            if self._unreported >= self.REPORT_NS:
                self._on_busy(self._unreported)
                self._unreported = 0


class EventLoopThread:
    """An event loop running on its own daemon thread, holding a decode thread pool as the
    loop's default executor while it runs.

    Args:
        name: what the threads' names say they are for.
        decode_threads: threads of the decode pool, when the loop makes its own.
        on_busy: called from the loop's thread with the nanoseconds it spent working
            rather than waiting for IO, about a millisecond's worth at a time, or None.
        pool: the decode pool to hold (shared with the gather, `ReadContext.decode_pool`),
            or None for one of the loop's own.
    """

    def __init__(
        self,
        name: str,
        decode_threads: int,
        on_busy: Callable[[int], None] | None = None,
        pool: DecodePool | None = None,
    ) -> None:
        if on_busy is None:
            self._loop = asyncio.new_event_loop()
        else:
            self._loop = asyncio.SelectorEventLoop(_TimedSelector(on_busy))
        self._pool = DecodePool(name, decode_threads) if pool is None else pool
        self._loop.set_default_executor(self._pool.acquire())
        self._thread = threading.Thread(
            target=self._run, name=f"{THREAD_PREFIX}-{name}-loop", daemon=True
        )
        self._closed = False
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    @property
    def closed(self) -> bool:
        return self._closed

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._closed:
            coro.close()
            raise RuntimeError("the fetch event loop has been shut down")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _cancel_everything(self) -> None:
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        """Cancel in-flight work, stop the loop, join its thread, and release the decode
        pool (its threads are joined unless the gather still holds it)."""
        if self._closed:
            return
        self._closed = True
        if threading.current_thread() is self._thread:
            self._loop.stop()  # called from inside the loop (e.g. by a finalizer): no join
            self._pool.release()
            return
        if self._thread.is_alive():
            cancelled = asyncio.run_coroutine_threadsafe(self._cancel_everything(), self._loop)
            with contextlib.suppress(
                concurrent.futures.TimeoutError, concurrent.futures.CancelledError
            ):
                cancelled.result(timeout=STOP_TIMEOUT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=STOP_TIMEOUT_S)
        self._pool.release()
        if not self._thread.is_alive():
            self._loop.close()
