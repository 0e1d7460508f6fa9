"""Evaluation mode (`build_loader(evaluation=True)`) and `len(loader)`, on real zarr stores.

Evaluation: a fixed order, every sample of the split exactly once across the ranks, no
padding (a rank's last batch may be short, ranks' batch counts may differ), the same
samples and values on any world size. `len(loader)`: the batches one epoch yields on this
rank, known before anything is read, in both modes.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from insitubatch_nodes import (
    SAMPLE_INDEX_KEY,
    AnchorSet,
    SampleSpec,
    ZarrSource,
    build_loader,
    leads,
    window,
)
from insitubatch_nodes.core.draw_order import rank_epoch_order
from insitubatch_nodes.core.evaluation_shares import assign_evaluation, evaluation_shares
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from tests.helpers.batches import as_numpy, torch_roundtrip
from tests.helpers.loader_settings import (
    dealt_anchors,
    draw_rank_and_batch,
)
from tests.helpers.profiles import loader_property
from tests.helpers.resume_check import check_every_cut

SPEC = SampleSpec({"inputs": window(["t2m"], steps=2, stride=1), "targets": leads(["t2m"], [2])})


def _epoch(loader: Any) -> list[dict[str, np.ndarray]]:
    return [{k: as_numpy(v) for k, v in batch.items()} for batch in loader]


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_every_sample_once_across_the_ranks_in_order_without_padding(
    memory_url: Any, world_size: int
) -> None:
    url, truth = memory_url()  # 88 samples, units of 6: 15 units, the last of 4
    per_rank = []
    for rank in range(world_size):
        loader = build_loader(
            url, split="all", batch_size=7, rank=rank, world_size=world_size, evaluation=True
        )
        epochs = [_epoch(loader) for _ in range(2)]
        assert len(epochs[0]) == len(loader)
        for a, b in zip(*epochs, strict=True):  # a fixed order: the same every epoch
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
        sizes = [len(batch[SAMPLE_INDEX_KEY]) for batch in epochs[0]]
        assert all(size == 7 for size in sizes[:-1]) and 1 <= sizes[-1] <= 7
        per_rank.append(epochs[0])
    batches = [batch for rank_batches in per_rank for batch in rank_batches]
    indices = np.concatenate([batch[SAMPLE_INDEX_KEY] for batch in batches])
    assert indices.tolist() == list(range(88))  # once each, in order, whatever the world size
    for name in ("t2m", "u10"):  # and each sample's values are the stored ones
        assert np.array_equal(np.concatenate([batch[name] for batch in batches]), truth[name])
    if world_size > 1:  # unpadded: shares of whole units, so counts differ here
        assert len({sum(len(b[SAMPLE_INDEX_KEY]) for b in r) for r in per_rank}) > 1


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_windowed_evaluation_covers_the_splits_anchors_once(
    memory_url: Any, world_size: int
) -> None:
    url, truth = memory_url()
    source = ZarrSource.open(url)
    anchors = AnchorSet.for_split(source.geometry, source.split_units("train"), SPEC)
    expected = anchors.unit_samples(anchors.units).tolist()
    seen: list[int] = []
    for rank in range(world_size):
        loader = build_loader(
            url, spec=SPEC, batch_size=5, rank=rank, world_size=world_size, evaluation=True
        )
        batches = _epoch(loader)
        assert len(batches) == len(loader)
        for batch in batches:
            steps = batch[SAMPLE_INDEX_KEY][:, None] + np.array([-1, 0])
            assert np.array_equal(batch["inputs/t2m"], truth["t2m"][steps])
            seen += batch[SAMPLE_INDEX_KEY].tolist()
    assert seen == expected


def test_evaluation_resumes_at_every_cut(memory_url: Any) -> None:
    url, _ = memory_url()
    for rank in range(2):
        check_every_cut(
            lambda rank=rank: (
                build_loader(
                    url,
                    split="all",
                    batch_size=9,
                    block_chunks=2,
                    rank=rank,
                    world_size=2,
                    evaluation=True,
                ).root
            ),
            epochs_differ=False,
        )


def test_drop_last_is_refused_in_evaluation(memory_url: Any) -> None:
    url, _ = memory_url()
    with pytest.raises(ValueError) as raised:
        build_loader(url, split="all", evaluation=True, drop_last=True)
    assert str(raised.value) == (
        "drop_last=True drops samples, and an evaluation loader yields every sample of the "
        "split once (its ranks' last batches may be short); leave drop_last False"
    )


@pytest.mark.parametrize("saved_by_evaluation", [True, False])
def test_a_state_of_the_other_mode_is_refused(memory_url: Any, saved_by_evaluation: bool) -> None:
    url, _ = memory_url()
    saver = build_loader(url, split="all", batch_size=8, evaluation=saved_by_evaluation)
    next(iter(saver))
    state = torch_roundtrip(saver.state_dict())
    loader = build_loader(url, split="all", batch_size=8, evaluation=not saved_by_evaluation)
    loader.load_state_dict(state)
    with pytest.raises(ValueError) as raised:
        next(iter(loader))
    saved, this = ("an evaluation", "a training")[:: 1 if saved_by_evaluation else -1]
    assert str(raised.value) == (
        f"this state was saved by {saved} loader and this is {this} loader (build_loader's "
        f"evaluation=); resume it in a loader built as the one that saved it"
    )


def test_an_evaluation_state_is_plain_data(memory_url: Any) -> None:
    url, _ = memory_url()
    loader = build_loader(url, split="all", batch_size=8, evaluation=True)
    iterator = iter(loader)
    first = [next(iterator)[SAMPLE_INDEX_KEY].tolist() for _ in range(3)]
    state = loader.state_dict()
    fresh = build_loader(url, split="all", batch_size=8, evaluation=True)
    fresh.load_state_dict(json.loads(json.dumps(state)))
    rest = [b[SAMPLE_INDEX_KEY].tolist() for b in fresh]
    assert [i for b in first + rest for i in b] == list(range(88))


# --- the pure functions


@given(
    st.integers(1, 40),
    st.integers(1, 9),
    st.integers(1, 5),
    st.integers(1, 4),
    st.integers(1, 12),
    st.integers(0, 5),
)
def test_evaluation_shares_are_contiguous_balanced_and_cover_the_split(
    num_units: int, last: int, world_size: int, block_chunks: int, batch_size: int, epoch: int
) -> None:
    length = 9 * (num_units - 1) + last  # units of 9 samples, the last one maybe short
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((length,), (9,), "float32")})
    units = np.arange(num_units)
    if num_units < world_size:
        with pytest.raises(ValueError, match="fewer than world_size"):
            evaluation_shares(geometry, units, world_size)
        return
    shares = evaluation_shares(geometry, units, world_size)
    assert np.array_equal(np.concatenate(shares), units) and all(s.size for s in shares)
    counts = [int(geometry.unit_sizes(s).sum()) for s in shares]
    assert max(counts) - min(counts) <= 2 * 9  # at most about a unit either side
    orders = []
    for rank in range(world_size):
        a = assign_evaluation(
            geometry, units, seed=5, epoch=epoch, rank=rank, world_size=world_size
        )
        order = rank_epoch_order(
            geometry, a, block_chunks=block_chunks, batch_size=batch_size, drop_last=False
        )
        assert order.size == a.samples_per_rank(batch_size, False) == counts[rank]
        orders.append(order)
    assert np.concatenate(orders).tolist() == list(range(length))


@loader_property(25)
@given(
    num_samples=st.integers(5, 70),
    chunk_a=st.integers(1, 7),
    chunk_b=st.integers(1, 7),
    block_chunks=st.integers(1, 4),
    drop_last=st.booleans(),
    evaluation=st.booleans(),
    windowed=st.booleans(),
    data=st.data(),
)
def test_len_is_the_batches_an_epoch_yields(
    memory_url: Any,
    num_samples: int,
    chunk_a: int,
    chunk_b: int,
    block_chunks: int,
    drop_last: bool,
    evaluation: bool,
    windowed: bool,
    data: st.DataObject,
) -> None:
    url, _ = memory_url(
        {
            "t2m": ((num_samples, 2), (chunk_a, 1), "float32"),
            "b": ((num_samples,), (chunk_b,), "int16"),
        }
    )
    spec = SPEC if windowed else None
    drop_last = drop_last and not evaluation
    dealt = dealt_anchors(url, spec)
    world_size, rank, batch_size = draw_rank_and_batch(data, dealt, drop_last)
    loader = build_loader(
        url,
        split="all",
        spec=spec,
        batch_size=batch_size,
        block_chunks=block_chunks,
        rank=rank,
        world_size=world_size,
        drop_last=drop_last,
        evaluation=evaluation,
        max_inflight=3,
    )
    length = len(loader)  # before anything is read
    epochs = [[len(b[SAMPLE_INDEX_KEY]) for b in loader] for _ in range(2)]
    assert [len(sizes) for sizes in epochs] == [length, length]
    assert all(size == batch_size for size in epochs[0][:-1])
