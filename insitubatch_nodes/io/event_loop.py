"""One asyncio event loop on a daemon thread, with its own decode thread pool.

Both are started together and stopped together, and stopping never waits forever: all
IO parallelism of the library lives here, so shutting this down is what "no thread left
behind" means.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

THREAD_PREFIX = "insitubatch"
STOP_TIMEOUT_S = 10.0


class EventLoopThread:
    def __init__(self, name: str, decode_threads: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=decode_threads, thread_name_prefix=f"{THREAD_PREFIX}-{name}-decode"
        )
        self._loop.set_default_executor(self._executor)
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
        """Cancel in-flight work, stop the loop, join its thread and the decode pool."""
        if self._closed:
            return
        self._closed = True
        if threading.current_thread() is self._thread:
            self._loop.stop()  # called from inside the loop (e.g. by a finalizer): no join
            return
        if self._thread.is_alive():
            cancelled = asyncio.run_coroutine_threadsafe(self._cancel_everything(), self._loop)
            with contextlib.suppress(
                concurrent.futures.TimeoutError, concurrent.futures.CancelledError
            ):
                cancelled.result(timeout=STOP_TIMEOUT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=STOP_TIMEOUT_S)
        self._executor.shutdown(wait=True, cancel_futures=True)
        if not self._thread.is_alive():
            self._loop.close()
