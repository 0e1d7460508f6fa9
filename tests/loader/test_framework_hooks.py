"""What training frameworks ask of a loader beyond iteration, on real zarr stores: its
epoch set from outside (`set_epoch`, `sampler.set_epoch`), one state for every rank
(`all_ranks_state`), the rank of a process group started after the loader was built, and
clear refusals. The frameworks themselves run in test_lightning.py and test_accelerate.py."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from insitubatch_nodes import SAMPLE_INDEX_KEY, build_loader
from insitubatch_nodes.loader.rank_states import RANK_STATES_KEY
from tests.helpers.batches import torch_roundtrip


def _indices(batches: Any) -> list[list[int]]:
    return [batch[SAMPLE_INDEX_KEY].tolist() for batch in batches]


def _epochs(url: str, count: int, **kwargs: Any) -> list[list[list[int]]]:
    loader = build_loader(url, split="all", batch_size=8, **kwargs)
    return [_indices(loader) for _ in range(count)]


def test_set_epoch_before_the_first_batch_starts_that_epoch(memory_url: Any) -> None:
    url, _ = memory_url()
    epochs = _epochs(url, 4)
    loader = build_loader(url, split="all", batch_size=8)
    iterator = iter(loader)  # what Lightning does: iter() first, set_epoch() after
    loader.sampler.set_epoch(2)
    assert _indices(iterator) == epochs[2]
    assert _indices(loader) == epochs[3]  # then on, one epoch per iter()


def test_set_epoch_after_batches_were_handed_out_sets_the_next_iter(memory_url: Any) -> None:
    url, _ = memory_url()
    epochs = _epochs(url, 4)
    loader = build_loader(url, split="all", batch_size=8)
    iterator = iter(loader)
    first = _indices([next(iterator), next(iterator)])
    loader.set_epoch(3)  # does not change the epoch under way
    assert first + _indices(iterator) == epochs[0]
    assert _indices(loader) == epochs[3]
    loader.set_epoch(0)  # the next iter() repeats epoch 0, as a DistributedSampler would
    assert _indices(loader) == epochs[0]


def test_set_epoch_of_a_restored_state(memory_url: Any) -> None:
    url, _ = memory_url()
    epochs = _epochs(url, 3, seed=4)
    saver = build_loader(url, split="all", batch_size=8, seed=4)
    for _ in saver:
        pass
    iterator = iter(saver)
    taken = _indices([next(iterator) for _ in range(3)])  # 3 batches into epoch 1
    state = torch_roundtrip(saver.state_dict())

    same = build_loader(url, split="all", batch_size=8, seed=4)
    same.load_state_dict(state)
    resumed = iter(same)
    same.set_epoch(1)  # the epoch it is in: nothing changes (Lightning, mid-epoch)
    assert taken + _indices(resumed) == epochs[1]

    moved = build_loader(url, split="all", batch_size=8, seed=4)
    moved.load_state_dict(state)
    resumed = iter(moved)
    moved.set_epoch(2)  # before a batch: the restored epoch is over for the consumer
    assert _indices(resumed) == epochs[2]

    pending = build_loader(url, split="all", batch_size=8, seed=4)
    pending.set_epoch(0)
    pending.load_state_dict(state)  # a state loaded later says the epoch
    assert _indices(pending) == epochs[1][3:]


def test_the_loader_looks_like_a_dataloader_of_whole_batches(memory_url: Any) -> None:
    url, _ = memory_url()
    loader = build_loader(url, split="all", batch_size=8)
    assert loader.batch_sampler is None and callable(loader.sampler.set_epoch)
    assert not hasattr(loader, "dataset")
    with pytest.raises(AttributeError, match="Do not call accelerate's skip_first_batches"):
        _ = loader.dataset
    with pytest.raises(ValueError, match="epoch must be >= 0, got -1"):
        loader.set_epoch(-1)


def test_an_all_ranks_state_is_plain_data_and_resumes(memory_url: Any) -> None:
    url, _ = memory_url()
    epochs = _epochs(url, 2, seed=2)
    loader = build_loader(url, split="all", batch_size=8, seed=2, all_ranks_state=True)
    iterator = iter(loader)
    taken = _indices([next(iterator) for _ in range(4)])
    state = loader.state_dict()
    assert list(state) == [RANK_STATES_KEY] and len(state[RANK_STATES_KEY]) == 1
    for copy in (json.loads(json.dumps(state)), torch_roundtrip(state)):
        for all_ranks in (True, False):  # either kind of loader takes either kind of state
            fresh = build_loader(url, split="all", batch_size=8, seed=2, all_ranks_state=all_ranks)
            fresh.load_state_dict(copy)
            assert taken + _indices(fresh) == epochs[0]
            assert _indices(fresh) == epochs[1]


def test_a_state_of_more_ranks_is_refused_unless_it_is_one_cut_of_a_pool_shuffle(
    memory_url: Any,
) -> None:
    """Another number of ranks resumes the rest of the epoch (test_elastic_resume) only
    from the pool shuffle's cursors, of every rank of one run at one step."""
    url, _ = memory_url()
    block = {"split": "all", "batch_size": 8, "shuffle": "block"}
    single = build_loader(url, all_ranks_state=True, **block).state_dict()
    two = {RANK_STATES_KEY: single[RANK_STATES_KEY] * 2}
    loader = build_loader(url, **block)
    with pytest.raises(ValueError) as raised:
        loader.load_state_dict(two)
    assert str(raised.value) == (
        "resuming on another number of ranks needs the pool shuffle's cursors, and these "
        "states were saved by a loader with the block shuffle: resume them on as many "
        "ranks as saved them, or train with shuffle='pool'"
    )
    pool = build_loader(url, split="all", batch_size=8, shuffle="pool", all_ranks_state=True)
    twice = {RANK_STATES_KEY: pool.state_dict()[RANK_STATES_KEY] * 2}  # rank 0 of 1, twice
    with pytest.raises(ValueError, match=r"entry 0 was saved with \{'world_size': 1\}"):
        build_loader(url, split="all", batch_size=8, shuffle="pool").load_state_dict(twice)


def test_another_ranks_state_is_refused_saying_what_to_do(memory_url: Any) -> None:
    url, _ = memory_url()
    saver = build_loader(url, split="all", batch_size=8, rank=0, world_size=2)
    next(iter(saver))
    loader = build_loader(url, split="all", batch_size=8, rank=1, world_size=2)
    loader.load_state_dict(saver.state_dict())
    with pytest.raises(ValueError) as raised:
        next(iter(loader))
    assert str(raised.value) == (
        "this state is rank 0's (of 2), and this process is rank 1: each rank resumes from "
        "its own state. Load each rank's own state, or build the loader with "
        "all_ranks_state=True so that one state_dict() holds every rank's (Lightning and "
        "accelerate write rank 0's checkpoint only)"
    )


@pytest.fixture
def process_group() -> Iterator[None]:
    """A one-process gloo group, started by the test when it wants it, always ended."""
    yield
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _start_group() -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    torch.distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1
    )


def test_a_process_group_started_after_the_build_gives_the_rank(
    memory_url: Any, monkeypatch: pytest.MonkeyPatch, process_group: None
) -> None:
    url, _ = memory_url()
    monkeypatch.setenv("RANK", "1")  # what a launcher set; the process group says otherwise
    monkeypatch.setenv("WORLD_SIZE", "2")
    found = build_loader(url, split="all", batch_size=8)
    given = build_loader(url, split="all", batch_size=8, rank=1, world_size=2)
    half = len(given)
    _start_group()  # rank 0 of 1, as a framework would start it, after the build
    assert len(found) == 11 and len(given) == half < 11
    assert sorted(i for b in _indices(found) for i in b) == list(range(88))
    state = found.state_dict()["root"]  # the rank it took is the one its states name
    assert json.dumps(state).count('"rank": 0, "world_size": 1') == 1
