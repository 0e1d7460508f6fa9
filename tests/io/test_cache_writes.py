"""The chunk cache's writing thread (`io.cache.cache_writes.QueuedWrites`): every entry queued is
written once, in order, off the caller's thread; the queue's bytes stay bounded; the thread
ends when the queue is empty."""

from __future__ import annotations

import threading
import time

import pytest

from insitubatch_nodes.io.cache.cache_writes import QueuedWrites


class Recorder:
    """A `write` that records what it wrote and on which thread, optionally held at a gate."""

    def __init__(self, gate: threading.Event | None = None, fail_on: bytes | None = None) -> None:
        self.writes: list[tuple[bytes, bytes, str]] = []
        self.threads: list[threading.Thread] = []
        self.gate = gate
        self.fail_on = fail_on

    def __call__(self, digest: bytes, payload: bytes | memoryview) -> int:
        if self.gate is not None:
            assert self.gate.wait(10)
        if digest == self.fail_on:
            raise RuntimeError("a bug in write")
        self.writes.append((digest, bytes(payload), threading.current_thread().name))
        self.threads.append(threading.current_thread())  # kept: ids are reused
        return len(payload) + 1


def _cache_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.endswith("-cache-write")]


def test_queued_entries_are_written_once_in_order_off_the_callers_thread() -> None:
    write = Recorder()
    queued = QueuedWrites(write)
    told: list[int] = []
    entries = [(bytes([i]) * 32, bytes([i]) * (10 + i)) for i in range(50)]
    for digest, payload in entries:
        queued.submit(digest, payload, told.append)
    queued.drain()
    assert [(d, p) for d, p, _ in write.writes] == entries
    assert {name for _, _, name in write.writes} == {"insitubatch-cache-write"}
    assert sorted(told) == sorted(len(p) + 1 for _, p in entries)
    assert not queued.pending and _cache_threads() == []  # ended with the queue


def test_entries_a_moment_apart_share_one_thread() -> None:
    write = Recorder()
    queued = QueuedWrites(write)
    for i in range(20):  # each written before the next comes: the thread waits for it
        queued.submit(bytes([i]) * 32, b"x", lambda written: None)
        time.sleep(0.005)
    queued.drain()
    assert len(write.writes) == 20 and len(set(write.threads)) == 1
    assert _cache_threads() == []


def test_past_its_bound_the_caller_writes_the_entry_itself() -> None:
    gate = threading.Event()
    write = Recorder(gate)
    queued = QueuedWrites(write, max_bytes=100)
    told: list[int] = []
    queued.submit(b"a" * 32, b"x" * 60, told.append)  # queued; the thread waits at the gate
    caller = threading.Thread(
        target=queued.submit, args=(b"b" * 32, b"y" * 60, told.append), name="caller"
    )
    caller.start()  # 120 bytes would pass the bound: this one is written by its caller
    try:
        caller.join(0.2)
        assert caller.is_alive()  # held at the gate too: not queued
    finally:
        gate.set()
    caller.join(10)
    queued.drain()
    names = {digest[:1]: name for digest, _, name in write.writes}
    assert names == {b"a": "insitubatch-cache-write", b"b": "caller"}
    assert sorted(told) == [61, 61]


def test_an_entry_that_fails_to_write_does_not_stop_the_rest() -> None:
    write = Recorder(fail_on=b"b" * 32)
    queued = QueuedWrites(write)
    for name in (b"a", b"b", b"c"):
        queued.submit(name * 32, name * 4, lambda written: None)
    queued.drain()
    assert [digest[:1] for digest, _, _ in write.writes] == [b"a", b"c"]
    assert not queued.pending and _cache_threads() == []


def test_the_queue_never_holds_more_than_its_bound_not_even_one_large_entry() -> None:
    gate = threading.Event()
    write = Recorder(gate)
    queued = QueuedWrites(write, max_bytes=100)
    told: list[int] = []
    callers = []
    for i, size in enumerate([150, 60, 30, 20, 90]):  # 150: more than the bound alone
        caller = threading.Thread(
            target=queued.submit, args=(bytes([i]) * 32, b"x" * size, told.append)
        )
        caller.start()
        callers.append(caller)
        caller.join(0.05)  # queued ones return at once; the others wait at the gate
    gate.set()
    for caller in callers:
        caller.join(10)
    queued.drain()
    assert len(write.writes) == 5
    assert 0 < queued.most_queued_bytes <= 100  # the queue's own high-water mark
    assert queued.queued_bytes == 0


def test_a_queue_of_no_bytes_writes_every_entry_on_its_callers_thread() -> None:
    write = Recorder()
    queued = QueuedWrites(write, max_bytes=0)
    queued.submit(b"a" * 32, b"x", lambda written: None)
    queued.drain()
    assert [name for _, _, name in write.writes] == [threading.current_thread().name]
    assert queued.most_queued_bytes == 0 and _cache_threads() == []


def test_an_entry_whose_thread_cannot_start_is_written_by_its_caller(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write = Recorder()
    queued = QueuedWrites(write)
    told: list[int] = []

    def refused(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")  # what a process out of threads gets

    monkeypatch.setattr(threading.Thread, "start", refused)
    queued.submit(b"a" * 32, b"x", told.append)
    monkeypatch.undo()
    assert [name for _, _, name in write.writes] == [threading.current_thread().name]
    assert queued.queued_bytes == 0 and not queued.pending
    queued.submit(b"b" * 32, b"y", told.append)  # a later entry has its thread again
    queued.drain()
    assert [digest[:1] for digest, _, _ in write.writes] == [b"a", b"b"]
    assert write.writes[1][2] == "insitubatch-cache-write" and told == [2, 2]
    assert _cache_threads() == []


def test_the_bound_counts_the_whole_reply_a_queued_entry_keeps_alive() -> None:
    """A sharded store's inner chunks are views of one merged read (`shard_reader`): a
    queued view keeps the whole reply alive, gaps between chunks included, so the bound
    counts that reply's bytes once, however many of its views are queued, until the last
    is written."""
    gate = threading.Event()
    write = Recorder(gate)
    queued = QueuedWrites(write, max_bytes=100)
    told: list[int] = []
    merged = memoryview(b"m" * 90)  # one reply of three chunks
    for i, (lo, hi) in enumerate([(0, 30), (30, 60), (60, 90)]):
        queued.submit(bytes([i]) * 32, merged[lo:hi], told.append)  # queued: 90 bytes held
    assert queued.queued_bytes == 90
    sparse = memoryview(b"s" * 1000)  # a reply of one wanted chunk and a wide gap
    caller = threading.Thread(
        target=queued.submit, args=(b"z" * 32, sparse[:10], told.append), name="caller"
    )
    caller.start()  # its 10 bytes keep 1000 alive: past the bound, written by its caller
    try:
        caller.join(0.2)
        assert caller.is_alive()  # held at the gate: not queued
    finally:
        gate.set()
    caller.join(10)
    queued.drain()
    names = {digest[:1]: name for digest, _, name in write.writes}
    assert names[b"z"] == "caller" and len(write.writes) == 4
    assert queued.most_queued_bytes == 90 and queued.queued_bytes == 0
