"""The library's threads, told apart from the test runner's by their names."""

from __future__ import annotations

import gc
import threading
import time

from insitubatch_nodes.io.host.threads import THREAD_PREFIX


def our_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]


def threads_left_by_earlier_tests() -> set[threading.Thread]:
    """Our threads still running before a test starts, after a garbage collection: a loader
    another test dropped stops its threads when it is collected, which a reference cycle
    can put off until the collector runs, so a test counting the threads it leaves sets
    these aside rather than blaming itself for them."""
    gc.collect()
    deadline = time.monotonic() + 2.0
    while our_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return set(our_threads())
