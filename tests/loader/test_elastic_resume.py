"""Resuming loader states saved under W ranks with W' ranks (elastic resume), in one
process: loaders built at explicit ranks stand for the processes, and their states are
gathered by hand as `gather_rank_states` gathers them under torch.distributed. Every
sample not seen before the cut is seen once after it (plus the documented padding), the
next epoch is a fresh run's at W', and the state stays small over repeated resizes."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from insitubatch_nodes import build_loader
from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY
from insitubatch_nodes.core.pool_order import pool_draw
from insitubatch_nodes.loader.rank_states import RANK_STATES_KEY
from insitubatch_nodes.nodes.chunk_permute import ChunkPermuteNode
from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.pool_shuffle import PoolShuffleNode
from tests.helpers.batches import torch_roundtrip
from tests.helpers.loader_settings import (
    batch_sizes,
    dealt_anchors,
    world_sizes,
)
from tests.helpers.profiles import loader_property

VARIABLES = {"a": ((61, 3), (4, 3), "float32"), "b": ((61,), (3,), "int16")}


_MADE: list[Any] = []


@pytest.fixture(autouse=True)
def _close_loaders() -> Any:
    """Close every loader a test made, so that no fetch thread outlives it (later tests
    count the threads left running)."""
    yield
    while _MADE:
        _MADE.pop().close()


def loaders(url: str, world: int, batch: int, **kwargs: Any) -> list[Any]:
    made = [
        build_loader(
            url,
            split="all",
            batch_size=batch,
            shuffle="pool",
            rank=r,
            world_size=world,
            seed=3,
            device="cpu",
            max_inflight=2,
            **kwargs,
        )
        for r in range(world)
    ]
    _MADE.extend(made)
    return made


def take(loader: Any, iterator: Any, batches: int | None) -> list[int]:
    """Sample ids of the next `batches` batches (None: to the epoch's end)."""
    seen: list[int] = []
    while batches is None or batches > 0:
        try:
            batch = next(iterator)
        except StopIteration:
            break
        seen += batch[SAMPLE_INDEX_KEY].tolist()
        batches = None if batches is None else batches - 1
    return seen


def gathered(group: list[Any]) -> dict[str, Any]:
    """Every rank's state in one object, through JSON and torch.save as a checkpoint."""
    state = {RANK_STATES_KEY: [loader.state_dict() for loader in group]}
    return torch_roundtrip(json.loads(json.dumps(state)))


def rest_of_epoch(
    url: str, worlds: list[int], cuts: list[int], batch: int, **kwargs: Any
) -> tuple[list[int], list[list[int]], list[Any], int]:
    """Samples before the last resize, each last rank's samples after it, the last loaders,
    and the largest gathered state's JSON size."""
    group = loaders(url, worlds[0], batch, **kwargs)
    iterators = [iter(loader) for loader in group]
    before: list[int] = []
    largest = 0
    for world, cut in zip(worlds[1:], cuts, strict=True):
        for loader, iterator in zip(group, iterators, strict=True):
            before += take(loader, iterator, cut)
        state = gathered(group)
        largest = max(largest, len(json.dumps(state)))
        for loader in group:
            loader.close()
        group = loaders(url, world, batch, **kwargs)
        for loader in group:
            loader.load_state_dict(state)
        iterators = [iter(loader) for loader in group]
    after = [take(loader, it, None) for loader, it in zip(group, iterators, strict=True)]
    return before, after, group, largest


def pure_rest_order(loader: Any, batch: int, drop_last: bool) -> list[int]:
    """What `core.pool_order.pool_draw` says a resized rank yields: its share as its
    `ChunkPermuteNode` was given it (`core.elastic`), drawn by the pure function."""
    nodes = graph_nodes(loader.root)
    permute = next(n for n in nodes if isinstance(n, ChunkPermuteNode))
    pool = next(n for n in nodes if isinstance(n, PoolShuffleNode))
    a = permute.assignment
    # a re-dealt share, or (a cut before any batch) the epoch's own deal at W'
    starts = np.zeros(a.units.size, dtype=np.int64) if a.starts is None else a.starts
    order, _ = pool_draw(
        permute.geometry,
        seed=a.seed,
        epoch=a.epoch,
        rank=a.rank,
        units=a.units,
        starts=starts,
        target=a.samples_per_rank(batch, drop_last),
        pool_size=pool.pool_size,
        batch_size=batch,
        ramp=pool.pool_ramp,
        interleave=pool.pool_interleave,
    )
    return order.tolist()


def check_exactly_once(before: list[int], after: list[list[int]], total: int) -> None:
    assert len({len(part) for part in after}) == 1  # equal counts, so equal batches
    counts = Counter(before + [i for part in after for i in part])
    assert set(counts) == set(range(total))  # every sample seen


@pytest.mark.parametrize(
    ("worlds", "cuts"), [([2, 1], [3]), ([2, 3], [2]), ([2, 3, 1], [2, 1]), ([2, 2], [3])]
)
def test_a_resized_epoch_sees_every_sample_and_the_next_is_a_fresh_runs(
    memory_url: Any, worlds: list[int], cuts: list[int]
) -> None:
    url, _ = memory_url(VARIABLES)
    before, after, group, _ = rest_of_epoch(url, worlds, cuts, batch=5)
    check_exactly_once(before, after, 61)
    # the next epoch at W' is the one a run started at W' yields
    fresh = loaders(url, worlds[-1], 5)
    for loader in fresh:
        take(loader, iter(loader), None)  # epoch 0
    for loader, again in zip(group, fresh, strict=True):
        assert take(loader, iter(loader), None) == take(again, iter(again), None)
        loader.close()
        again.close()


def test_len_says_the_batches_of_the_rest_before_and_during_it(memory_url: Any) -> None:
    url, _ = memory_url(VARIABLES)
    group = loaders(url, 2, 5)
    for loader in group:
        take(loader, iter(loader), 3)
    state = gathered(group)
    three = loaders(url, 3, 5)
    for loader in three:
        loader.load_state_dict(state)
        before = len(loader)  # what Lightning asks before iterating
        rest = take(loader, iter(loader), None)
        assert before == -(-len(rest) // 5) == 3  # 31 samples left: 11, 10, 10 -> 11 each
    iterator = iter(three[0])  # the next epoch begins: a fresh run's count
    batches = -(-len(take(three[0], iterator, None)) // 5)
    assert len(three[0]) == len(loaders(url, 3, 5)[0]) == batches


def test_same_world_size_resumes_the_batches_of_the_uninterrupted_run(memory_url: Any) -> None:
    url, _ = memory_url(VARIABLES)
    whole = [take(loader, iter(loader), None) for loader in loaders(url, 2, 5)]
    before, after, _, _ = rest_of_epoch(url, [2, 2], [3], batch=5)
    assert [before[i * 15 : (i + 1) * 15] + part for i, part in enumerate(after)] == whole


def test_a_state_resized_twice_stays_small(memory_url: Any) -> None:
    url, _ = memory_url(VARIABLES)
    _, _, _, once = rest_of_epoch(url, [2, 3], [2], batch=5)
    _, _, _, chain = rest_of_epoch(url, [2, 3, 1, 3, 2], [2, 1, 1, 1], batch=5)
    # gathered states of 3 ranks after one resize and after a chain of four: no growth
    # with the chain beyond what the number of ranks saved adds (a few KB each)
    assert chain < 2 * once


def test_a_block_shuffle_state_is_refused_on_another_world_size(memory_url: Any) -> None:
    url, _ = memory_url(VARIABLES)
    group = [
        build_loader(
            url, split="all", batch_size=5, shuffle="block", rank=r, world_size=2, device="cpu"
        )
        for r in range(2)
    ]
    _MADE.extend(group)
    for loader in group:
        take(loader, iter(loader), 2)
    state = gathered(group)
    with pytest.raises(ValueError, match="shuffle='pool'"):
        loaders(url, 1, 5)[0].load_state_dict(state)


@loader_property(25)
@given(
    st.integers(12, 70),
    st.integers(1, 7),
    st.integers(1, 7),
    st.integers(40, 3000),
    st.booleans(),
    st.integers(0, 2),
    st.booleans(),
    st.data(),
)
def test_resize_property(
    memory_url: Any,
    samples: int,
    chunk_a: int,
    chunk_b: int,
    window: int,
    drop_last: bool,
    pool_ramp: int,
    pool_interleave: bool,
    data: st.DataObject,
) -> None:
    """Over store geometries, world sizes, batch sizes, pool sizes (a window of a few
    units' bytes up to all of them), ramps (the rest's pool ramps up afresh), batches
    interleaved or not, drop_last and cuts."""
    url, _ = memory_url(
        {"a": ((samples, 3), (chunk_a, 3), "float32"), "b": ((samples,), (chunk_b,), "int16")}
    )
    settings_ = {"drop_last": drop_last, "shuffle_window": window, "pool_ramp": pool_ramp}
    settings_ |= {"pool_interleave": pool_interleave}
    dealt = dealt_anchors(url)
    old = data.draw(world_sizes(dealt), label="old")
    new = data.draw(world_sizes(dealt), label="new")
    batch = data.draw(batch_sizes(dealt, [old, new], drop_last, most=9), label="batch")
    batches = len(loaders(url, old, batch, **settings_)[0])
    cut = data.draw(st.integers(0, batches))
    before, after, group, _ = rest_of_epoch(url, [old, new], [cut], batch, **settings_)
    assert len({len(part) for part in after}) == 1
    permute = next(n for n in graph_nodes(group[0].root) if isinstance(n, ChunkPermuteNode))
    if permute.epoch == 1:
        # a state at the epoch's end, or whose rest fills no batch with drop_last, begins
        # the next epoch, as a run at W' would
        assert cut == batches or drop_last
        fresh = loaders(url, new, batch, **settings_)
        for loader in fresh:
            take(loader, iter(loader), None)
        assert after == [take(loader, iter(loader), None) for loader in fresh]
        return
    if old != new:  # (as many ranks resume the saved cursors: test_pool_shuffle)
        for loader, part in zip(group, after, strict=True):
            assert part == pure_rest_order(loader, batch, drop_last)
    counts = Counter(before + [i for part in after for i in part])
    if drop_last:
        assert max(counts.values()) == 1
    else:
        assert set(counts) == set(range(samples))


def test_a_resized_epoch_resumed_on_as_many_ranks_keeps_its_batches(memory_url: Any) -> None:
    url, _ = memory_url(VARIABLES)
    before, after, _, _ = rest_of_epoch(url, [2, 3], [2], batch=5)
    again, after_again, _, _ = rest_of_epoch(url, [2, 3, 3], [2, 1], batch=5)
    assert again[:20] == before
    ones = [again[20 + 5 * r : 25 + 5 * r] for r in range(3)]  # one batch on each new rank
    assert [one + part for one, part in zip(ones, after_again, strict=True)] == after
