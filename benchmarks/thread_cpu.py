"""CPU time of this process's Python threads, apart from its native ones.

A store's client may run threads of its own (obstore's tokio runtime: its workers and its
blocking pool, which reads local files), whose CPU `time.process_time` counts with
Python's. To tell the library's Python work per read from the store client's, this sums
the CPU of Python threads only: those alive at the start and end (read by their CPU
clocks) and those that started or ended in between (read as they end, by wrapping
`threading.Thread.run`). `by_thread()` gives the same sum thread by thread, under each
thread's name, so a benchmark can tell a decode pool from the threads around it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


def _thread_cpu_s(thread: threading.Thread) -> float:
    """CPU seconds `thread` has used so far (0 if it is no longer running)."""
    if thread.ident is None:
        return 0.0
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (OSError, ProcessLookupError):  # ended between enumerate() and the read
        return 0.0


class PythonThreadsCPU:
    """CPU seconds of every Python thread between `start()` and `seconds()`; threads
    started inside the `with` block are counted up to their end even when they end before
    `seconds()` (enter it before the threads to measure start).
    """

    def __init__(self) -> None:
        self._start: dict[threading.Thread, float] = {}
        self._ended: dict[threading.Thread, float] = {}
        self._original: Callable[[threading.Thread], None] | None = None

    def __enter__(self) -> PythonThreadsCPU:
        original = threading.Thread.run
        self._original = original
        ended = self._ended

        def run(thread: threading.Thread) -> None:
            try:
                original(thread)
            finally:
                ended[thread] = time.thread_time()

        threading.Thread.run = run  # type: ignore[method-assign]
        self.start()
        return self

    def start(self) -> None:
        """Count from now."""
        self._ended.clear()
        self._start = {t: _thread_cpu_s(t) for t in threading.enumerate()}

    def seconds(self) -> float:
        """CPU seconds of Python threads since `start()` (or `__enter__`)."""
        return sum(self.by_thread().values())

    def by_thread(self) -> dict[str, float]:
        """CPU seconds of each Python thread since `start()` (or `__enter__`), by thread
        name; threads that share a name (one pool's threads over several runs) are added.
        """
        used: dict[str, float] = {}
        live = set(threading.enumerate())
        for thread in live | set(self._ended):
            now = self._ended[thread] if thread in self._ended else _thread_cpu_s(thread)
            spent = now - self._start.get(thread, 0.0)
            used[thread.name] = used.get(thread.name, 0.0) + spent
        return used

    def __exit__(self, *exc_info: object) -> None:
        threading.Thread.run = self._original  # type: ignore[assignment, method-assign]
