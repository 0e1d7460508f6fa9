"""The decode pool the fetch loop and the gather share (`io.reads.decode_pool`): its
threads live while either holds it, stop at the last release, and an event loop closing
does not end them under the other user."""

from __future__ import annotations

import threading

import pytest

from insitubatch_nodes.io.reads.decode_pool import DecodePool
from insitubatch_nodes.io.reads.event_loop import EventLoopThread


def _pool_threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(f"insitubatch-{name}-decode")]


def test_the_threads_stop_at_the_last_release_only() -> None:
    pool = DecodePool("pooltest", 2)
    first = pool.acquire()
    second = pool.acquire()
    assert first is second
    assert (
        first.submit(threading.current_thread)
        .result()
        .name.startswith("insitubatch-pooltest-decode")
    )
    pool.release()
    assert pool.running and first.submit(lambda: 1).result() == 1
    pool.release()
    assert not pool.running and _pool_threads("pooltest") == []
    with pytest.raises(RuntimeError):
        first.submit(lambda: 1)
    pool.release()  # one release too many is harmless
    again = pool.acquire()
    assert again is not first and again.submit(lambda: 2).result() == 2
    pool.release()
    assert _pool_threads("pooltest") == []


def test_an_event_loop_closing_leaves_the_pool_to_its_other_user() -> None:
    """The gather still copies on the decode threads after the fetch loop read the epoch's
    last block and stopped: the loop's closing (which shuts its default executor down)
    must not end them."""
    pool = DecodePool("looptest", 1)
    executor = pool.acquire()  # the gather's hold
    loop = EventLoopThread("looptest", 1, pool=pool)
    loop.close()
    assert executor.submit(lambda: 3).result() == 3
    pool.release()
    assert _pool_threads("looptest") == []
