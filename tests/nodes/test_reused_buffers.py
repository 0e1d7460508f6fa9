"""The batch memory pool never hands out memory that something still views."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes import build_loader
from insitubatch_nodes.nodes.reused_buffers import SLACK, ReusedBuffers
from tests.helpers.batches import batch_key

# (operation, argument): take an array of `rows` rows, drop the i-th live one, or keep only
# a view (or a tensor) of the i-th live one
steps = st.lists(
    st.tuples(st.sampled_from(["take", "drop", "view", "tensor"]), st.integers(0, 40)),
    min_size=1,
    max_size=60,
)


def _memory_behind(array: np.ndarray) -> int:
    """Bytes of the allocation an array views (what it holds alive), not its own size:
    the memory budget counts requested sizes, so the pool must not hand out much more."""
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array.nbytes


@settings(max_examples=200, deadline=None)
@given(steps=steps, max_idle_rows=st.integers(0, 200))
def test_live_arrays_never_share_memory_and_keep_their_values(
    steps: list[tuple[str, int]], max_idle_rows: int
) -> None:
    pool = ReusedBuffers(max_idle_bytes=max_idle_rows * 8 * 4)
    live: list[tuple[Any, int]] = []  # (array, view or tensor, of a value written once)
    stamp = 0
    for operation, argument in steps:
        if operation == "take":
            array = pool.empty((argument % 20 + 1, 8), np.dtype("float32"))
            assert _memory_behind(array) <= array.nbytes + array.nbytes // SLACK
            stamp += 1
            array[...] = stamp
            live.append((array, stamp))
        elif live:
            index = argument % len(live)
            held, value = live[index]
            if operation == "drop":
                live.pop(index)
            elif operation == "view":
                live[index] = (held[1:], value)
            else:
                live[index] = (torch.from_numpy(np.asarray(held)), value)
        for held, value in live:
            assert (np.asarray(held) == value).all()
    arrays = [np.asarray(held) for held, _ in live]
    for i, a in enumerate(arrays):
        for b in arrays[i + 1 :]:
            assert not np.shares_memory(a, b)


def test_memory_of_dropped_blocks_is_handed_out_again() -> None:
    pool = ReusedBuffers(max_idle_bytes=1 << 20)
    first = pool.empty((16, 64), np.dtype("float64"))
    address = first.__array_interface__["data"][0]
    del first
    again = pool.empty((16, 64), np.dtype("float64"))
    assert again.__array_interface__["data"][0] == address and pool.reused == 1
    much_smaller = pool.empty((2, 64), np.dtype("float64"))
    assert not np.shares_memory(again, much_smaller)  # busy slab: a new one


def test_idle_memory_is_bounded() -> None:
    pool = ReusedBuffers(max_idle_bytes=3 * 1024)
    held = [pool.empty((1024,), np.dtype("uint8")) for _ in range(8)]
    del held
    pool.empty((10_000,), np.dtype("uint8"))  # fits no idle slab: the idle ones are trimmed
    again = [pool.empty((1024,), np.dtype("uint8")) for _ in range(8)]
    assert pool.reused == 3  # only three idle kilobytes were kept
    assert len({a.__array_interface__["data"][0] for a in again}) == 8


def test_batches_and_blocks_a_consumer_keeps_are_never_overwritten(memory_url: Any) -> None:
    """Memory is recycled only once nothing refers to it: an epoch's batches, all kept,
    equal the same epoch's batches copied out as they came."""
    url, _ = memory_url()
    copied = [
        {k: v.clone() for k, v in b.items()}
        for b in build_loader(url, split="all", batch_size=5, block_chunks=2, device="cpu")
    ]
    kept = list(build_loader(url, split="all", batch_size=5, block_chunks=2, device="cpu"))
    assert [batch_key(b) for b in kept] == [batch_key(b) for b in copied]
    again = build_loader(url, split="all", batch_size=5, block_chunks=2, device="cpu")
    views = [b["t2m"][1:] for b in again]  # a consumer that keeps only views of its batches
    assert all(torch.equal(v, b["t2m"][1:]) for v, b in zip(views, copied, strict=True))
