"""The gather's takes with the decode threads' help (`nodes.helped_takes`): the same bytes
as one `np.take`, and a caller that never waits for a decode thread busy elsewhere."""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.io.reads.help_board import HelpBoard
from insitubatch_nodes.nodes.helped_takes import HelpedTakes


@pytest.fixture(scope="module")
def executor() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        yield pool


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(0, 40),
    steps=st.sampled_from([None, 1, 3]),
    inner=st.integers(1, 50),
    helpers=st.integers(0, 4),
    seed=st.integers(0, 2**16),
)
def test_a_helped_take_copies_what_one_take_does(
    executor: concurrent.futures.ThreadPoolExecutor,
    rows: int,
    steps: int | None,
    inner: int,
    helpers: int,
    seed: int,
) -> None:
    rng = np.random.default_rng(seed)
    source = rng.random((30, inner, 4), dtype=np.float32)
    shape = (rows,) if steps is None else (rows, steps)
    picked = rng.integers(0, 30, size=shape)
    want = np.take(source, picked, axis=0)
    out = np.full(want.shape, np.nan, dtype=np.float32)
    HelpedTakes(executor, helpers, min_piece_bytes=64).take(source, picked, out)  # pieces

    np.testing.assert_array_equal(out, want)


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 30), min_size=0, max_size=5),
    helpers=st.integers(0, 3),
    seed=st.integers(0, 2**16),
)
def test_a_batch_of_takes_copies_what_each_take_does(
    executor: concurrent.futures.ThreadPoolExecutor, sizes: list[int], helpers: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    sources = [rng.random((20, 7, 3), dtype=np.float32) for _ in sizes]
    picks = [rng.integers(0, 20, size=n) for n in sizes]
    outs = [np.full((n, 7, 3), np.nan, dtype=np.float32) for n in sizes]
    board = HelpBoard()
    HelpedTakes(executor, helpers, min_piece_bytes=64, board=board).take_all(
        list(zip(sources, picks, outs, strict=True))
    )
    for source, picked, out in zip(sources, picks, outs, strict=True):
        np.testing.assert_array_equal(out, np.take(source, picked, axis=0))
    assert board.lend_a_hand() == 0, "the job was left on the board"


def test_a_busy_decode_thread_helps_between_its_chunks() -> None:
    """A decode thread busy with a block's chunks looks at the board between two of them
    (here: in a loop until released) and copies pieces the caller has not reached yet;
    before the board, it could help only once idle, so the caller copied everything."""
    release = threading.Event()
    board = HelpBoard()

    def decoding() -> None:
        while not release.is_set():
            board.lend_a_hand()

    source = np.arange(256 * 8192, dtype=np.float64).reshape(256, 8192)  # 16 MiB
    picked = np.arange(255, -1, -1)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        busy = pool.submit(decoding)
        takes = HelpedTakes(pool, 1, min_piece_bytes=1, board=board)
        for _ in range(20):  # each take: 8 pieces of 2 MiB, the helper spinning beside
            out = np.zeros_like(source)
            takes.take(source, picked, out)
            np.testing.assert_array_equal(out, source[::-1])
            if takes.helped_pieces:
                break
        release.set()
        busy.result()
    assert takes.helped_pieces > 0, "the busy thread never helped"
    assert takes.pieces >= takes.helped_pieces


def test_the_caller_copies_alone_rather_than_wait_for_a_busy_decode_thread() -> None:
    """A decode thread busy with a block's chunks (here: held until the take is done) is
    not waited for: the caller takes every piece, and the request it made is withdrawn."""
    release = threading.Event()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        busy = pool.submit(release.wait, 30)
        source = np.arange(64 * 4096, dtype=np.float64).reshape(64, 4096)
        picked = np.arange(63, -1, -1)
        out = np.empty((64, 4096))
        started = time.monotonic()
        HelpedTakes(pool, 1).take(source, picked, out)  # 2 MiB: two pieces
        took = time.monotonic() - started
        release.set()
        busy.result()
    np.testing.assert_array_equal(out, source[::-1])
    assert took < 5, "the take waited for the busy decode thread"


def test_without_an_executor_it_is_one_take() -> None:
    source = np.arange(20.0).reshape(10, 2)
    out = np.empty((3, 2))
    HelpedTakes(None, 8).take(source, np.array([9, 0, 4]), out)
    np.testing.assert_array_equal(out, source[[9, 0, 4]])
