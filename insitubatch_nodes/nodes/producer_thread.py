"""ProducerThread: runs a node's `produce()` a few items ahead on one named thread.

A GPU training step spends most of its host time waiting for kernels. The batch gather
(a vectorised copy that releases the GIL) and the queueing of its device copy can run in
that time, but only off the training thread: done on it, they add to every step. This is
the one thread that does it. It never drops an item: whatever it produced and the
consumer has not taken yet stays queued across `stop()`, so a node that keeps the
items it was handed can resume from exactly where its consumer stood.

The producer owns its source while it runs: the consumer thread must not touch that source
(reset, state, close) until `stop()` has returned.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from insitubatch_nodes.io.host.threads import STOP_TIMEOUT_S, THREAD_PREFIX

T = TypeVar("T")

WAKE_INTERVAL_S = 0.1  # how often a waiting consumer checks that the producer still runs


@dataclass(frozen=True)
class _End:
    """The source is exhausted (`error is None`) or `produce()` raised `error`."""

    error: BaseException | None = None


class ProducerThread(Generic[T]):
    """At most `depth` produced items wait for the consumer; `produce()` raising
    `StopIteration` ends the stream, any other exception is re-raised by `take()`."""

    def __init__(self, name: str, produce: Callable[[], T], depth: int) -> None:
        if depth < 1:
            raise ValueError(f"a producer thread keeps at least one item ahead, got {depth}")
        self._produce = produce
        self._items: queue.SimpleQueue[T | _End] = queue.SimpleQueue()
        self._room = threading.Semaphore(depth)
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"{THREAD_PREFIX}-{name}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._room.acquire()
            if self._stopping.is_set():
                return
            try:
                item = self._produce()
            except StopIteration:
                self._items.put(_End())
                return
            except BaseException as error:  # handed to the consumer, which raises it
                self._items.put(_End(error))
                return
            self._items.put(item)  # even when stopping: it was taken from the source

    def take(self) -> T:
        """The next item; `StopIteration` at the end, the producer's error if it failed."""
        while True:
            try:
                got = self._items.get(timeout=WAKE_INTERVAL_S)
            except queue.Empty:
                if not self._thread.is_alive() and self._items.empty():
                    raise RuntimeError("the producer thread stopped without a word") from None
                continue
            if isinstance(got, _End):
                self._thread.join(STOP_TIMEOUT_S)
                if got.error is not None:
                    raise got.error
                raise StopIteration
            self._room.release()
            return got

    def stop(self) -> list[T]:
        """Stop producing and wait for the thread; returns the items it had produced that
        were not taken, in order (the end of the stream or an error is not among them)."""
        self._stopping.set()
        self._room.release()  # wakes a producer waiting for room
        if threading.current_thread() is self._thread:
            return []  # a finalizer run by the producer itself: it exits after this item
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            raise RuntimeError(
                f"the producer thread did not stop within {STOP_TIMEOUT_S:.0f} s: a read it "
                f"waits on hangs (see the retry policy's per-attempt timeout)"
            )
        left: list[T] = []
        while not self._items.empty():
            got = self._items.get_nowait()
            if not isinstance(got, _End):
                left.append(got)
        return left
