"""Reading across epochs: the next epoch's first blocks are read while this one ends,
without changing a single batch, and resume stays exact whatever is read ahead."""

from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any

import pytest

from insitubatch_nodes import AsyncFetchNode, Loader, build_loader
from insitubatch_nodes.nodes.graph import graph_nodes
from tests.helpers.batches import batch_key, torch_roundtrip
from tests.helpers.graphs import build_stage
from tests.helpers.resume_check import check_every_cut
from tests.helpers.stores import write_store
from tests.helpers.threads import our_threads

cpu_loader = functools.partial(build_loader, device="cpu", split="all", batch_size=8)


def _fetch(loader: Loader[Any]) -> AsyncFetchNode:
    return next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))


def _epochs(loader: Loader[Any], epochs: int) -> list[list[Any]]:
    return [[batch_key(b) for b in loader] for _ in range(epochs)]


def _no_threads_left(timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while our_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return our_threads() == []


@pytest.fixture(params=["local", "memory"])
def url(request: pytest.FixtureRequest, tmp_path: Path, memory_url: Any) -> str:
    """A local store (read-ahead of `prefetch_blocks` blocks) and an in-memory one (read
    ahead until `max_inflight` reads are pending)."""
    if request.param == "local":
        return write_store(tmp_path / "store.zarr")[0]
    return str(memory_url()[0])


@pytest.mark.parametrize("device_prefetch", [0, 2])
def test_batches_are_those_of_a_loader_that_stops_at_each_epoch(
    url: str, device_prefetch: int
) -> None:
    expected = _epochs(cpu_loader(url, block_chunks=2), 3)
    loader = cpu_loader(
        url, block_chunks=2, device_prefetch=device_prefetch, read_across_epochs=True
    )
    assert _epochs(loader, 3) == expected
    loader.close()
    assert _no_threads_left()


def test_the_next_epoch_is_read_while_this_one_ends_and_close_stops_it(url: str) -> None:
    plain = cpu_loader(url, block_chunks=2)
    _epochs(plain, 1)
    per_epoch = _fetch(plain).stats.blocks_fetched
    assert _no_threads_left()  # a loader that stops at each epoch leaves nothing running

    loader = cpu_loader(url, block_chunks=2, read_across_epochs=True)
    first = _epochs(loader, 1)
    deadline = time.monotonic() + 5
    while _fetch(loader).stats.blocks_fetched == per_epoch and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _fetch(loader).stats.blocks_fetched > per_epoch  # the next epoch's, read already
    assert our_threads()  # still reading between epochs
    loader.close()
    assert _no_threads_left()
    # Closed between epochs: the next epoch is read again from its start, unchanged.
    assert _epochs(loader, 1) == _epochs(cpu_loader(url, block_chunks=2), 2)[1:]
    assert first


def _settled(fetch: AsyncFetchNode, timeout: float = 5.0) -> int:
    """Blocks fetched, once the read-ahead has stopped adding to them."""
    count, deadline = -1, time.monotonic() + timeout
    while fetch.stats.blocks_fetched != count and time.monotonic() < deadline:
        count = fetch.stats.blocks_fetched
        time.sleep(0.1)
    return count


@pytest.mark.parametrize("block_chunks", [2, 30])
def test_the_next_epoch_uses_the_blocks_read_for_it(tmp_path: Path, block_chunks: int) -> None:
    """Nothing is read twice, and every epoch reads into the next: on a local store the
    read-ahead holds `prefetch_blocks` (2) blocks, so after each epoch 2 of the next
    epoch's blocks (all of it, for an epoch of one block) are read, and the next epoch
    reads only the rest."""
    url = write_store(tmp_path / "store.zarr")[0]
    plain = cpu_loader(url, block_chunks=block_chunks)
    _epochs(plain, 1)
    per_epoch = _fetch(plain).stats.blocks_fetched
    loader = cpu_loader(url, block_chunks=block_chunks, read_across_epochs=True)
    for epoch in range(1, 5):
        _epochs(loader, 1)
        assert _settled(_fetch(loader)) == epoch * per_epoch + min(2, per_epoch)
    loader.close()


def test_leaving_an_epoch_early_stops_everything(url: str) -> None:
    loader = cpu_loader(url, block_chunks=2, read_across_epochs=True)
    _epochs(loader, 1)
    for i, _ in enumerate(loader):
        if i == 2:
            break
    assert _no_threads_left()


def test_a_loaded_state_drops_what_was_read_for_the_next_epoch(url: str) -> None:
    """Between epochs, the next epoch's blocks are read; loading a state from the middle
    of the first epoch must yield that epoch's rest, not the blocks read ahead."""
    expected = _epochs(cpu_loader(url, block_chunks=2), 2)
    loader = cpu_loader(url, block_chunks=2, read_across_epochs=True)
    iterator = iter(loader)
    head = [batch_key(next(iterator)) for _ in range(3)]
    state = torch_roundtrip(loader.state_dict())
    head += [batch_key(b) for b in iterator]
    assert head == expected[0]
    loader.load_state_dict(state)
    assert _epochs(loader, 2) == [expected[0][3:], expected[1]]
    loader.close()


@pytest.mark.parametrize("stage", ["fetch", "gather"])
@pytest.mark.parametrize("block_chunks", [1, 3])
def test_resume_is_exact_at_every_cut(url: str, stage: str, block_chunks: int) -> None:
    check_every_cut(
        lambda: build_stage(
            url, stage, block_chunks=block_chunks, batch_size=7, read_across_epochs=True
        )
    )
