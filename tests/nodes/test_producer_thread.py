"""The producer thread hands items over in order, never runs more than `depth` ahead, and
never loses an item it produced when it is stopped."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.nodes.producer_thread import ProducerThread


class _Counter:
    def __init__(self, end: int) -> None:
        self.end = end
        self.made = 0
        self.lock = threading.Lock()

    def __call__(self) -> int:
        with self.lock:
            if self.made == self.end:
                raise StopIteration
            self.made += 1
            return self.made - 1


@settings(max_examples=30, deadline=None)
@given(end=st.integers(0, 30), depth=st.integers(1, 5), stops=st.lists(st.integers(0, 30)))
def test_items_come_in_order_across_stops_and_none_is_lost(
    end: int, depth: int, stops: list[int]
) -> None:
    """Stopped after some takes, a producer gives back what it made and nobody took; a new
    one over the same source goes on from there."""
    source = _Counter(end)
    got: list[int] = []
    kept: list[int] = []
    for takes in [*stops, end + 1]:
        producer = ProducerThread("test", source, depth)
        for _ in range(takes):
            if kept:
                got.append(kept.pop(0))
                continue
            try:
                got.append(producer.take())
            except StopIteration:
                break
        kept += producer.stop()
    assert got + kept == list(range(end))


def test_it_never_runs_more_than_depth_ahead() -> None:
    source = _Counter(100)
    producer = ProducerThread("test", source, depth=3)
    time.sleep(0.05)
    assert source.made == 3
    producer.take()
    deadline = time.monotonic() + 5
    while source.made < 4 and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(0.05)
    assert source.made == 4
    assert producer.stop() == [1, 2, 3]


def test_an_error_reaches_the_consumer_after_the_items_before_it() -> None:
    calls = iter([1, 2])

    def produce() -> int:
        try:
            return next(calls)
        except StopIteration:
            raise OSError("the store went away") from None

    producer = ProducerThread("test", produce, depth=2)
    assert [producer.take(), producer.take()] == [1, 2]
    with pytest.raises(OSError, match="went away"):
        producer.take()
    assert producer.stop() == []


def test_depth_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one item ahead"):
        ProducerThread("test", lambda: 1, depth=0)


def test_stop_from_the_producer_itself_does_not_deadlock() -> None:
    """A finalizer may run on the producer thread (it dropped the node's last reference)."""
    holder: list[ProducerThread[int]] = []
    built, stopped = threading.Event(), threading.Event()

    def produce() -> int:
        built.wait(5)
        holder[0].stop()
        stopped.set()
        return 7

    producer = ProducerThread("test", produce, depth=1)
    holder.append(producer)
    built.set()
    assert stopped.wait(5)
    assert producer.stop() == [7]
