"""Cache admissions written by a thread of their own, so that a cold epoch's decode threads
do not wait for the kernel.

Admitting an entry costs its checksum and a `pwritev` of the store's bytes, which the
kernel copies into the page cache: measured on the benchmark VM, about 40 us of CPU per
116 KB entry and 0.6-1.1 ms per 2.5 MB one, against 0.6 ms and 5 ms of reading and
decoding the chunk. Done in the decode thread that took the chunk, the copy holds up the
next chunk's decode; handed to this thread, it overlaps the decodes on a core they leave
idle (a latency-bound epoch leaves most of them idle). It is not less CPU, only CPU off
the read path.

The bytes queued are the store's own buffers (`bytes`, or an array over them), kept
alive until written, never copied; a caller whose buffer is reused after the sink
returns (a scratch) must write synchronously instead (`ChunkCache.admit`). The queue
holds at most `max_bytes`, a loader's share of its memory budget for it
(`core.memory_bound.MemoryPlan.cache_queue_bytes`: the budget counts a reply in flight
only until it is decoded, and this share from then until it is written). It counts the
replies the entries keep alive, not the entries: a sharded store's inner chunks are views
of one merged read (`shard_reader`), gaps between them included, so a reply is counted
whole, once however many of its views are queued, until its last is written. An entry that
would pass it, even alone, is written by its caller, so a writer that cannot keep up
slows the reads as the synchronous path would, never drops an entry. The thread starts
when entries are queued and ends when the queue has stayed empty for `LINGER_S` (not one
thread per entry: starting one costs about as much as a small entry's write), so an idle
cache holds no thread; `drain` ends it at once, once the queue is written.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable

from insitubatch_nodes.core.memory_bound import CACHE_QUEUE_BYTES
from insitubatch_nodes.io.host.threads import THREAD_PREFIX

log = logging.getLogger(__name__)

LINGER_S = 0.1  # how long the thread waits for more entries before it ends

Write = Callable[[bytes, "bytes | memoryview"], int]  # (digest, payload) -> bytes written
Written = Callable[[int], None]  # told the bytes an entry took once written (0: not)


class QueuedWrites:
    """Entries waiting for `write`, written in order by one thread (see the module).

    Args:
        write: writes one entry synchronously; returns the bytes it took (0 when not
            written: full, there already, or a failing disk). Must not raise.
        max_bytes: the most payload bytes queued at once (0: every entry is written by
            its caller).
    """

    def __init__(self, write: Write, max_bytes: int = CACHE_QUEUE_BYTES) -> None:
        self._write = write
        self._max_bytes = max_bytes
        self._most_queued = 0
        self._refused = False  # a thread could not be started (warned once)
        self._lock = threading.Condition(threading.Lock())
        self._queue: collections.deque[tuple[bytes, bytes | memoryview, Written]] = (
            collections.deque()
        )
        self._queued_bytes = 0
        self._replies: dict[int, list[int]] = {}  # id(reply) -> [entries queued, its bytes]
        self._thread: threading.Thread | None = None
        self._draining = 0  # threads in `drain`: the writing thread ends once the queue is empty

    @property
    def max_bytes(self) -> int:
        """The most payload bytes queued at once."""
        return self._max_bytes

    @property
    def queued_bytes(self) -> int:
        """Bytes of the replies that entries queued or being written keep alive now."""
        with self._lock:
            return self._queued_bytes

    @property
    def most_queued_bytes(self) -> int:
        """The most bytes `queued_bytes` counted at once, so far: at most `max_bytes`."""
        with self._lock:
            return self._most_queued

    @property
    def pending(self) -> bool:
        """Whether the writing thread is running: entries are queued or being written, or
        were a moment ago (`drain` ends it)."""
        with self._lock:
            return self._thread is not None

    def submit(self, digest: bytes, payload: bytes | memoryview, written: Written) -> None:
        """Queue entry `digest` holding `payload` (kept, not copied, until written), or write
        it now when the queue is full; `written` is told the bytes it took, from whichever
        thread wrote it.

        Args:
            digest: the entry's key digest.
            payload: the chunk's stored bytes; must not change until written.
            written: told the bytes the entry took once written (0 when it was not).
        """
        reply, reply_bytes = _reply_of(payload)
        with self._lock:
            held = self._replies.get(reply)
            size = 0 if held else reply_bytes  # a reply already queued is counted already
            if self._queued_bytes + size > self._max_bytes:
                queued = False
            else:
                queued = self._thread is not None or self._start()
                if queued:
                    self._queue.append((digest, payload, written))
                    if held:
                        held[0] += 1
                    else:
                        self._replies[reply] = [1, reply_bytes]
                    self._queued_bytes += size
                    self._most_queued = max(self._most_queued, self._queued_bytes)
                    self._lock.notify()
        if not queued:
            written(self._write(digest, payload))

    def _start(self) -> bool:
        """Start the writing thread (the lock held: it waits for the entry); False when
        the process cannot start one, so that the caller writes the entry itself rather
        than leave it queued with no thread to write it."""
        thread = threading.Thread(
            target=self._run, name=f"{THREAD_PREFIX}-cache-write", daemon=True
        )
        try:
            thread.start()
        except RuntimeError as err:  # out of threads (or memory for a stack)
            if not self._refused:
                self._refused = True
                log.warning("chunk cache: no thread to write entries on (%s); writing inline", err)
            return False
        self._thread = thread
        return True

    def drain(self) -> None:
        """Wait until every queued entry is written and the thread has ended."""
        with self._lock:
            thread = self._thread
            self._draining += 1
            self._lock.notify_all()
        try:
            if thread is not None and thread is not threading.current_thread():
                thread.join()
        finally:
            with self._lock:
                self._draining -= 1

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._queue and not self._draining:
                    self._lock.wait(LINGER_S)  # a burst's next entry: no new thread for it
                if not self._queue:
                    self._thread = None  # a later `submit` starts another
                    return
                digest, payload, written = self._queue.popleft()
            try:
                written(self._write(digest, payload))
            except Exception:  # `write` does not raise; a bug must not leave entries stuck
                log.exception("chunk cache: writing a queued entry failed")
            finally:
                reply, _ = _reply_of(payload)
                with self._lock:
                    held = self._replies[reply]
                    held[0] -= 1
                    if not held[0]:  # its last entry written: the reply may go
                        del self._replies[reply]
                        self._queued_bytes -= held[1]
                del payload


def _reply_of(payload: bytes | memoryview) -> tuple[int, int]:
    """The identity and the bytes of the buffer `payload` is a view of (itself when it is
    no view): what queuing it keeps alive. The identity is unique while it is queued."""
    reply = memoryview(payload).obj
    return id(reply), memoryview(reply).nbytes
