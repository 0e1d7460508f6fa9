"""Resume: a brand-new graph loaded with a saved state yields exactly what the
uninterrupted run would have yielded, at every cut point, for every stage."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from insitubatch_nodes import Loader, build_loader
from tests.helpers.batches import torch_roundtrip
from tests.helpers.graphs import STAGES, build_stage, fingerprint
from tests.helpers.loader_settings import (
    dealt_anchors,
    draw_rank_and_batch,
)
from tests.helpers.profiles import loader_property
from tests.helpers.resume_check import check_every_cut, uninterrupted


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_resumes_at_every_cut(memory_url: Any, stage: str) -> None:
    url, _ = memory_url()
    check_every_cut(lambda: build_stage(url, stage, block_chunks=2, batch_size=7))


@pytest.mark.parametrize(
    ("world_size", "drop_last", "batch_size", "block_chunks"),
    [(1, False, 5, 2), (2, False, 9, 1), (3, True, 4, 3), (2, True, 20, 1), (1, False, 1, 4)],
)
def test_default_graph_resumes_at_every_cut(
    memory_url: Any, world_size: int, drop_last: bool, batch_size: int, block_chunks: int
) -> None:
    url, _ = memory_url()
    for rank in range(world_size):
        check_every_cut(
            lambda rank=rank: (
                build_loader(
                    url,
                    split="all",
                    batch_size=batch_size,
                    block_chunks=block_chunks,
                    rank=rank,
                    world_size=world_size,
                    drop_last=drop_last,
                    max_inflight=3,
                ).root
            )
        )


@loader_property(25)
@given(
    num_samples=st.integers(5, 60),
    chunk_a=st.integers(1, 7),
    chunk_b=st.integers(1, 7),
    block_chunks=st.integers(1, 4),
    drop_last=st.booleans(),
    data=st.data(),
)
def test_resume_property(
    memory_url: Any,
    num_samples: int,
    chunk_a: int,
    chunk_b: int,
    block_chunks: int,
    drop_last: bool,
    data: st.DataObject,
) -> None:
    url, _ = memory_url(
        {
            "a": ((num_samples, 2), (chunk_a, 1), "float32"),
            "b": ((num_samples,), (chunk_b,), "int16"),
        }
    )
    dealt = dealt_anchors(url)
    world_size, rank, batch_size = draw_rank_and_batch(data, dealt, drop_last)

    def make() -> Any:
        return build_stage(
            url,
            "gather",
            rank=rank,
            world_size=world_size,
            block_chunks=block_chunks,
            batch_size=batch_size,
            drop_last=drop_last,
        )

    epoch0 = uninterrupted(make, 1)[0]
    cut = data.draw(st.integers(0, len(epoch0)))
    check_every_cut(make, cuts=[cut], epochs_differ=False)


def _upstream_style_check(make: Any, midpoint: int) -> None:
    """The save/load procedure torchdata asks of every node, on one reused node object:
    states taken before iterating, mid epoch 0, at the end of epoch 0 and mid epoch 1."""
    node = make()
    loader = Loader(node)
    state_before = loader.state_dict()
    epoch0: list[Any] = []
    state_mid0 = None
    for i, item in enumerate(loader):
        epoch0.append(fingerprint(item))
        if i + 1 == midpoint:
            state_mid0 = loader.state_dict()
    state_end0 = loader.state_dict()
    epoch1: list[Any] = []
    state_mid1 = None
    for i, item in enumerate(loader):
        epoch1.append(fingerprint(item))
        if i + 1 == midpoint:
            state_mid1 = loader.state_dict()
    assert state_mid0 is not None and state_mid1 is not None

    again = Loader(node)
    again.load_state_dict(state_before)
    assert [fingerprint(x) for x in again] == epoch0
    again = Loader(node)
    again.load_state_dict(state_mid0)
    assert [fingerprint(x) for x in again] == epoch0[midpoint:]
    assert [fingerprint(x) for x in again] == epoch1
    again = Loader(node)
    again.load_state_dict(state_mid1)
    assert [fingerprint(x) for x in again] == epoch1[midpoint:]
    stopped = Loader(node, restart_on_stop_iteration=False)
    stopped.load_state_dict(state_end0)
    assert list(stopped) == []
    restarted = Loader(node, restart_on_stop_iteration=True)
    restarted.load_state_dict(state_end0)
    assert [fingerprint(x) for x in restarted] == epoch1


@pytest.mark.parametrize("stage", STAGES)
def test_upstream_save_load_procedure(memory_url: Any, stage: str) -> None:
    url, _ = memory_url()
    _upstream_style_check(lambda: build_stage(url, stage, batch_size=6), midpoint=3)


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        ({"batch_size": 6}, r"PoolShuffleNode state was saved with batch_size=5"),
        ({"block_chunks": 3}, r"ReadPlanNode state was saved with block_chunks=2"),
        ({"seed": 1}, r"ChunkPermuteNode state was saved with seed=0"),
        ({"world_size": 2}, r"saved with world_size=1 but this graph has world_size=2"),
    ],
)
def test_a_state_from_other_settings_is_refused(
    memory_url: Any, changed: dict[str, int], message: str
) -> None:
    url, _ = memory_url()
    settings_ = {"split": "all", "batch_size": 5, "block_chunks": 2, "seed": 0, "world_size": 1}
    loader = build_loader(url, rank=0, **settings_)
    next(iter(loader))
    state = torch_roundtrip(loader.state_dict())
    other = build_loader(url, rank=0, **{**settings_, **changed})
    other.load_state_dict(state)
    with pytest.raises(ValueError, match=message):
        next(iter(other))


@pytest.mark.parametrize("stage", ["fetch", "device"])
@pytest.mark.parametrize("first_cut", [0, 2, None])  # None: the end of epoch 0
def test_chained_resumes_stay_exact(memory_url: Any, stage: str, first_cut: int | None) -> None:
    """Crash, resume, crash again, resume again: each checkpoint is where its run stood
    (torchdata 0.11's own Loader returns a stale state after resuming an epoch's end)."""
    url, _ = memory_url()
    make = lambda: build_stage(url, stage, batch_size=6)  # noqa: E731
    epochs = uninterrupted(make, 4)
    stream = [item for epoch in epochs for item in epoch]
    epoch_ends = list(itertools.accumulate(len(epoch) for epoch in epochs))
    position = epoch_ends[0] if first_cut is None else first_cut
    first = Loader(make())
    iterator = iter(first)
    for _ in range(position):
        next(iterator)
    state = torch_roundtrip(first.state_dict())
    for cut in (1, 2):
        again = Loader(make())
        again.load_state_dict(state)
        iterator = iter(again)
        assert [fingerprint(next(iterator)) for _ in range(cut)] == stream[position:][:cut]
        position += cut
        state = torch_roundtrip(again.state_dict())
    last = Loader(make())
    last.load_state_dict(state)
    epoch_end = next(end for end in epoch_ends if end > position)
    following_end = next(end for end in epoch_ends if end > epoch_end)
    assert [fingerprint(x) for x in last] == stream[position:epoch_end]
    assert [fingerprint(x) for x in last] == stream[epoch_end:following_end]


def test_a_state_loaded_after_state_dict_is_used(memory_url: Any) -> None:
    url, _ = memory_url()
    epoch0 = uninterrupted(lambda: build_stage(url, "device"), 1)[0]
    saved = Loader(build_stage(url, "device"))
    iterator = iter(saved)
    next(iterator)
    state = torch_roundtrip(saved.state_dict())
    fresh = Loader(build_stage(url, "device"))
    fresh.state_dict()  # before any iter(): e.g. a checkpoint of an untouched loader
    fresh.load_state_dict(state)
    assert [fingerprint(x) for x in fresh] == epoch0[1:]


@pytest.mark.parametrize("cut", [1, 3])
def test_close_mid_epoch_then_going_on_loses_nothing(memory_url: Any, cut: int) -> None:
    url, _ = memory_url()
    make = lambda: build_stage(url, "device", batch_size=4, block_chunks=1)  # noqa: E731
    epoch0, epoch1 = uninterrupted(make, 2)
    loader = Loader(make())
    iterator = iter(loader)
    taken = [fingerprint(next(iterator)) for _ in range(cut)]
    loader.close()  # drops the blocks read ahead
    assert taken + [fingerprint(x) for x in iterator] == epoch0
    assert [fingerprint(x) for x in loader] == epoch1


def test_rolling_back_on_the_same_loader(memory_url: Any) -> None:
    """load_state_dict + iter() while the old for-loop's generator is still alive: when it
    is dropped it closes the graph, which must not cost the new iteration any sample."""
    url, _ = memory_url()
    make = lambda: build_stage(url, "device", batch_size=4, block_chunks=1)  # noqa: E731
    epoch0 = uninterrupted(make, 1)[0]
    loader = Loader(make())
    old = iter(loader)
    for _ in range(2):
        next(old)
    state = loader.state_dict()
    next(old)
    loader.load_state_dict(state)
    new = iter(loader)
    first = fingerprint(next(new))
    del old  # its finally closes the graph mid-epoch
    assert [first] + [fingerprint(x) for x in new] == epoch0[2:]
