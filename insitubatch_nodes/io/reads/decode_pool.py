"""The decode pool: one set of worker threads per fetch node, shared by the fetch loop (its
decodes and file reads) and the gather (its copies into batches), alive while either of
them uses it.

The gather's copy is the largest piece of Python-thread work per chunk left outside the
decodes (a chunk's bytes, copied once into its batch), and on one thread it caps what
more cores can give. Run on threads of its own it would compete with the decodes for the
same cores; run on the decode pool's it uses the cores the decodes leave idle, and adds no
thread. The two users live differently, though: the fetch loop stops as soon as the
epoch's last block is read, while the gather goes on drawing the pool's last batches. So
the pool counts its users: each `acquire` starts the threads if none run (lazily, as work
arrives), and the last `release` stops them (queued work cancelled, running work joined),
so that no thread outlives the epoch that needed it (`docs/design/threads.md`).

A decode thread busy with a block's chunks would take a queued copy only once its task of
many chunks is done; the pool's `board` (`io.reads.help_board`) is where copies are posted
for busy threads to help with between two chunks.
"""

from __future__ import annotations

import concurrent.futures
import threading

from insitubatch_nodes.io.host.threads import THREAD_PREFIX
from insitubatch_nodes.io.reads.help_board import HelpBoard


class _PoolExecutor(concurrent.futures.ThreadPoolExecutor):
    """A thread pool that only its `DecodePool` shuts down: an event loop whose default
    executor it is shuts its default executor down when it closes, and the gather may
    still be using the threads then.

    Args:
        threads: worker threads at most.
        prefix: the threads' name prefix.
    """

    def __init__(self, threads: int, prefix: str) -> None:
        self._mine = threading.local()
        super().__init__(threads, prefix, initializer=self._mark)

    def _mark(self) -> None:
        self._mine.worker = True

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Ignored: the `DecodePool` stops the threads when its last user releases it.

        Args:
            wait: ignored.
            cancel_futures: ignored.
        """

    def stop(self) -> None:
        """Cancel the queued work and join the threads (what the pool's last release does);
        from one of them (a release made by the garbage collector there), without the
        join, which would wait for itself."""
        in_worker = getattr(self._mine, "worker", False)
        super().shutdown(wait=not in_worker, cancel_futures=True)


class DecodePool:
    """Worker threads shared by a fetch node's loop and its gather (see the module).

    Thread-safe: users acquire and release it from their own threads.

    Args:
        name: what the threads' names say they are for (`insitubatch-{name}-decode_N`).
        threads: worker threads at most (an int >= 1).
    """

    def __init__(self, name: str, threads: int) -> None:
        self.name = name
        self.threads = threads
        self._lock = threading.Lock()
        self._users = 0
        self._executor: _PoolExecutor | None = None
        self.board = HelpBoard()  # copies the decode threads help with between chunks

    def acquire(self) -> concurrent.futures.ThreadPoolExecutor:
        """The pool's executor, started if no user holds it; hold it until `release`."""
        with self._lock:
            if self._executor is None:
                self._executor = _PoolExecutor(self.threads, f"{THREAD_PREFIX}-{self.name}-decode")
            self._users += 1
            return self._executor

    def release(self) -> None:
        """Stop holding the executor; the last user's release stops its threads."""
        with self._lock:
            if self._users == 0:
                return
            self._users -= 1
            if self._users:
                return
            executor, self._executor = self._executor, None
        assert executor is not None
        executor.stop()

    @property
    def running(self) -> bool:
        """Whether a user holds the executor now."""
        with self._lock:
            return self._executor is not None
