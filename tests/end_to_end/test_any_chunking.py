"""Any chunking, end to end: variables chunked 5, 7 and 12 steps along time (one unit of
420 on the least-common-multiple grid) get train/val/test splits and two ranks on the fine
grid; revisits read each unit in visits; values equal the store's, every sample is drawn
once per epoch, resume is exact at any cut, and a state of another grid is refused."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from insitubatch_nodes import (
    AnchorSet,
    ChunkPermuteNode,
    GatherNode,
    Loader,
    ReadPlanNode,
    SampleGeometry,
    SampleSpec,
    ShuffleBlockNode,
    ZarrSource,
    build_loader,
    window,
)
from insitubatch_nodes.cli.split_command import split_manifest
from insitubatch_nodes.core.memory_bound import sample_nbytes
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.pool_order import pool_epoch_order
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.pool_shuffle import PoolShuffleNode
from tests.helpers.graphs import build_stage
from tests.helpers.loader_settings import (
    dealt_anchors,
    draw_rank_and_batch,
)
from tests.helpers.profiles import loader_property
from tests.helpers.resume_check import check_every_cut, check_resumed_at
from tests.helpers.stores import write_store
from tests.helpers.time_stores import hourly

MISALIGNED = {
    "a": ((840, 3, 4), (5, 3, 4), "float32"),
    "b": ((840, 2), (7, 2), "int16"),
    "c": ((840, 1), (12, 1), "float32"),
}


@pytest.fixture(scope="module")
def misaligned(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, np.ndarray]]:
    return write_store(tmp_path_factory.mktemp("any") / "store.zarr", MISALIGNED)


def _epoch(loader: Loader[Any], truth: dict[str, np.ndarray]) -> list[np.ndarray]:
    """An epoch's sample indices, each batch's values checked against the store's."""
    batches = []
    for batch in loader:
        index = np.asarray(batch["sample_index"])
        for name, values in truth.items():
            assert np.array_equal(np.asarray(batch[name]), values[index]), name
        batches.append(index.copy())
    return batches


def test_the_lcm_grid_leaves_no_split_and_the_fine_grid_gives_three(
    misaligned: tuple[str, dict[str, np.ndarray]],
) -> None:
    url, _ = misaligned
    opened = ZarrSource.open(url)
    assert SampleGeometry.from_layouts(opened.layouts).unit_length == 420
    assert opened.geometry.unit_length == 5 and opened.manifest.unit_length == 5
    steps = {s: opened.step_ranges(s) for s in ("train", "val", "test")}
    assert sum(int((r[:, 1] - r[:, 0]).sum()) for r in steps.values()) == 840


@pytest.mark.parametrize("shuffle", ["block", "pool"])
def test_three_splits_on_two_ranks_read_the_stores_values_once(
    misaligned: tuple[str, dict[str, np.ndarray]], shuffle: str
) -> None:
    """Each split's two ranks yield equal batch counts of the store's own values and
    together every step of the split (training pads only with repeats of their own);
    evaluation covers val and test exactly once; no step is in two splits."""
    url, truth = misaligned
    seen = {}
    for split in ("train", "val", "test"):
        counts, covered = [], []
        for rank in range(2):
            loader = build_loader(
                url,
                split=split,
                batch_size=8,
                rank=rank,
                world_size=2,
                device="cpu",
                shuffle=shuffle,
                shuffle_window=1 << 16,
                memory_budget=1 << 26,
            )
            batches = _epoch(loader, truth)
            counts.append(len(batches))
            covered.append(np.concatenate(batches))
            stats = loader.stats()
            assert stats["chunk_amplification"] > 1.0  # chunks straddling units: read twice
        assert counts[0] == counts[1]
        seen[split] = np.unique(np.concatenate(covered))
        for rank in range(2):
            evaluated = build_loader(
                url,
                split=split,
                batch_size=8,
                rank=rank,
                world_size=2,
                device="cpu",
                evaluation=True,
            )
            covered[rank] = np.concatenate(_epoch(evaluated, truth))
        both = np.concatenate(covered)
        assert np.array_equal(np.sort(both), seen[split])  # evaluation: each once
    everything = np.concatenate(list(seen.values()))
    assert np.array_equal(np.sort(everything), np.arange(840))


def test_revisits_draw_every_sample_once_and_resume_exactly(
    misaligned: tuple[str, dict[str, np.ndarray]],
) -> None:
    url, truth = misaligned

    def make(revisits: int) -> Loader[Any]:
        return build_loader(
            url,
            variables=["a", "c"],
            split="all",
            batch_size=16,
            device="cpu",
            shuffle="pool",
            shuffle_window=1 << 15,
            memory_budget=1 << 26,
            revisits=revisits,
            spec=SampleSpec({"x": window(["a", "c"], steps=3)}),
        )

    loader = make(5)  # a and c (chunked 5 and 12) have units of 60: visits of 12 steps
    wanted = {k: truth[k] for k in ("a", "c")}
    epoch = []
    for batch in loader:
        index = np.asarray(batch["sample_index"])
        for name in ("a", "c"):
            got = np.asarray(batch[f"x/{name}"])
            assert np.array_equal(got, wanted[name][index[:, None] + np.arange(-2, 1)])
        epoch.append(index.copy())
    drawn = np.concatenate(epoch)
    assert np.array_equal(np.sort(drawn), np.arange(2, 840))  # each anchor once
    assert loader.stats()["chunk_amplification"] > 1.0
    resumed = make(5)
    cut = make(5)
    iterator = iter(cut)
    for _ in range(7):
        next(iterator)
    state = json.loads(json.dumps(cut.state_dict()))
    resumed.load_state_dict(state)
    rest = [np.asarray(b["sample_index"]).copy() for b in resumed]
    assert all(np.array_equal(x, y) for x, y in zip(rest, epoch[7:], strict=True))
    assert len(rest) == len(epoch) - 7
    other = make(1)
    other.load_state_dict(state)
    with pytest.raises(
        ValueError,
        match=r"unit_grid=\{'unit_steps': 12, 'revisits': 5\}.* but this graph has "
        r".*unit_grid=\{'unit_steps': 60, 'revisits': 1\}",
    ):
        next(iter(other))
    with pytest.raises(ValueError, match=r"revisits=7 must divide the unit length of 60"):
        make(7)


@loader_property(25)
@given(
    num_samples=st.integers(5, 70),
    chunk_a=st.integers(1, 7),
    chunk_b=st.integers(1, 7),
    pool_size=st.integers(1, 8),
    block_chunks=st.integers(1, 4),
    drop_last=st.booleans(),
    windowed=st.booleans(),
    data=st.data(),
)
def test_the_pool_node_yields_the_pure_order_on_fine_grids_and_resumes_at_any_cut(
    memory_url: Any,
    num_samples: int,
    chunk_a: int,
    chunk_b: int,
    pool_size: int,
    block_chunks: int,
    drop_last: bool,
    windowed: bool,
    data: st.DataObject,
) -> None:
    """The pool node over a fine grid or its revisits: the pure order, values as stored,
    and an exact resume from a state through JSON at a drawn cut."""
    url, truth = memory_url(
        {
            "a": ((num_samples, 2), (chunk_a, 1), "float32"),
            "b": ((num_samples, 1), (chunk_b, 1), "int16"),
        }
    )
    fine = min(chunk_a, chunk_b)
    divisors = [k for k in range(1, fine + 1) if fine % k == 0]
    unit_length = fine // data.draw(st.sampled_from(divisors))
    spec = SampleSpec({"x": window(["a", "b"], steps=2)}) if windowed else None
    dealt = dealt_anchors(url, spec, unit_length)
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
            spec=spec,
            pool_size=pool_size,
            unit_length=unit_length,
        )

    loader = Loader(make())
    epochs = []
    for _ in range(2):
        epoch = []
        for batch in loader:
            index = np.asarray(batch["sample_index"])
            if spec is None:
                assert np.array_equal(batch["a"], truth["a"][index])
            else:
                steps = index[:, None] + np.arange(-1, 1)
                assert np.array_equal(batch["x/b"], truth["b"][steps])
            epoch.append(index.copy())
        epochs.append(epoch)
    source = ZarrSource.open(url)
    grid = SampleGeometry(source.geometry.variables, unit_length)
    anchors = AnchorSet.for_steps(grid, source.step_ranges("all"), spec)
    for epoch, batches in enumerate(epochs):
        a = assign_epoch(
            anchors, anchors.units, seed=0, epoch=epoch, rank=rank, world_size=world_size
        )
        want = pool_epoch_order(
            anchors, a, pool_size=pool_size, batch_size=batch_size, drop_last=drop_last
        )
        assert np.array_equal(np.concatenate(batches), want)
    cut = data.draw(st.integers(0, len(epochs[0])))
    check_resumed_at(make, cut, epochs)


def test_a_manifest_on_the_fine_grid_round_trips(
    misaligned: tuple[str, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    url, _ = misaligned
    opened = ZarrSource.open(url)
    saved = tmp_path / "manifest.json"
    saved.write_text(opened.manifest.dumps())
    again = ZarrSource.open(url, manifest=saved)
    assert again.geometry.unit_length == 5
    assert np.array_equal(again.split_units("val"), opened.split_units("val"))


@pytest.mark.parametrize("revisits", [1, 2, 4])
def test_revisits_hold_more_units_in_the_same_window_within_the_budget(
    memory_url: Any, revisits: int
) -> None:
    """With k revisits the pool holds k times the units (P) for one window, and its blocks
    all fit the slots the budget planned (none gets memory of its own), the slots being a
    visit's rows, not a chunk's."""
    url, truth = memory_url({"a": ((480, 4, 4), (8, 4, 4), "float32")})
    loader = build_loader(
        url,
        split="all",
        batch_size=8,
        device="cpu",
        shuffle="pool",
        shuffle_window=16 * 8 * 64,  # 16 chunks of 8 steps of 64 bytes
        memory_budget=1 << 22,
        revisits=revisits,
    )
    pool = next(n for n in graph_nodes(loader.root) if isinstance(n, PoolShuffleNode))
    assert pool.pool_size == 16 * revisits
    drawn = np.concatenate(_epoch(loader, truth))
    assert np.array_equal(np.sort(drawn), np.arange(480))
    fetch = next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))
    slots = fetch.context.block_slots
    assert slots.blocks_outside == 0
    assert 0 < slots.peak_leased_bytes <= slots.capacity_bytes
    assert loader.stats()["chunk_amplification"] == pytest.approx(revisits)


def test_date_splits_inside_one_lcm_unit_fall_back_to_the_fine_grid(tmp_path: Path) -> None:
    """Variables chunked 5 and 7 hours (units of 35) with val and test cut inside the last
    unit: no split owns a unit there, so build_loader(splits=) and `insitubatch split`
    cut the same manifest on the fine grid, and each split reads exactly its hours."""
    import xarray as xr

    times = hourly("2020-01-01T00", 84)
    values = np.arange(84 * 6, dtype=np.float32).reshape(84, 2, 3)
    ds = xr.Dataset(
        {"t2m": (("time", "lat", "lon"), values), "u10": (("time", "lat", "lon"), -values)},
        coords={"time": times, "lat": np.arange(2.0), "lon": np.arange(3.0)},
    )
    encoding = {"t2m": {"chunks": (5, 2, 3)}, "u10": {"chunks": (7, 2, 3)}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds.to_zarr(str(tmp_path / "s.zarr"), zarr_format=3, encoding=encoding, consolidated=False)
    url = str(tmp_path / "s.zarr")
    splits = {
        "train": ("2020-01-01T00", "2020-01-03T07"),  # hours 0 .. 55
        "val": ("2020-01-03T08", "2020-01-03T17"),  # 56 .. 65
        "test": ("2020-01-03T18", "2020-01-04T11"),  # 66 .. 83
    }
    cut = split_manifest(url, splits)
    assert cut.unit_length == 5
    hours = {"train": (0, 56), "val": (56, 66), "test": (66, 84)}
    for split, (first, stop) in hours.items():
        loader = build_loader(
            url, split=split, splits=splits, batch_size=4, device="cpu", evaluation=True
        )
        drawn = []
        for batch in loader:
            index = np.asarray(batch["sample_index"])
            assert np.array_equal(np.asarray(batch["t2m"]), values[index])
            assert np.array_equal(np.asarray(batch["u10"]), -values[index])
            drawn.append(index)
        assert np.array_equal(np.concatenate(drawn), np.arange(first, stop))
    opened = ZarrSource.open(url, splits=splits)
    assert opened.manifest.to_json() == cut.to_json()


@pytest.mark.parametrize(
    ("unit_length", "pool_size", "world_size", "windowed"),
    [(2, None, 1, False), (2, 3, 2, True), (1, 4, 1, False), (1, None, 2, True)],
)
def test_every_cut_resumes_on_a_fine_grid_and_its_revisits(
    memory_url: Any, unit_length: int, pool_size: int | None, world_size: int, windowed: bool
) -> None:
    """The default store (chunks 3 and 2: units of 6) on the fine grid of 2 and on its
    revisits of 1 step, block and pool shuffles, with and without a window: every cut of
    an epoch, through a checkpoint, resumes into what the uninterrupted run yields."""
    url, _ = memory_url()
    spec = SampleSpec({"x": window(["t2m", "u10"], steps=3)}) if windowed else None
    for rank in range(world_size):
        check_every_cut(
            lambda rank=rank: build_stage(
                url,
                "device",
                rank=rank,
                world_size=world_size,
                batch_size=7,
                spec=spec,
                pool_size=pool_size,
                unit_length=unit_length,
            )
        )


def test_a_fine_grid_manifest_serves_a_subset_of_its_variables(
    misaligned: tuple[str, dict[str, np.ndarray]], tmp_path: Path
) -> None:
    """A manifest cut on the fine grid of a, b and c (units of 5 steps) resumes its splits
    for b and c alone (chunked 7 and 12, which 5 straddles): the same steps, the store's
    values, rather than a refusal of the manifest's own unit length."""
    url, truth = misaligned
    opened = ZarrSource.open(url)
    saved = tmp_path / "manifest.json"
    saved.write_text(opened.manifest.dumps())
    subset = ZarrSource.open(url, variables=["b", "c"], manifest=saved)
    assert subset.geometry.unit_length == 5
    assert np.array_equal(subset.step_ranges("val"), opened.step_ranges("val"))
    loader = build_loader(
        url,
        variables=["b", "c"],
        manifest=saved,
        split="val",
        batch_size=8,
        device="cpu",
        evaluation=True,
    )
    drawn = np.concatenate(_epoch(loader, {k: truth[k] for k in ("b", "c")}))
    (first, stop), *_ = opened.step_ranges("val").tolist()
    assert np.array_equal(drawn, np.arange(first, stop))


def test_a_graph_on_the_fine_grid_through_read_context_keeps_its_blocks_in_slots(
    misaligned: tuple[str, dict[str, np.ndarray]],
) -> None:
    """A graph made by hand on the source's own grid (the fine grid of 5 steps, which the
    7- and 12-step chunks straddle) with `ZarrSource.read_context`: its slots are a
    piece's rows, as the memory bound counts them, so blocks sized by that bound all lie
    in the slots (chunk-sized slots held fewer pieces, and most blocks took memory of
    their own, beyond the budget)."""
    url, truth = misaligned
    source = ZarrSource.open(url)
    anchors = AnchorSet.for_split(source.geometry, source.split_units("all"), None)
    capacity = 4 * anchors.block_rows_bound(2) * sample_nbytes(source.layouts)
    plans = ReadPlanNode(ChunkPermuteNode(anchors, anchors.units), anchors, block_chunks=2)
    fetch = AsyncFetchNode(plans, source.read_context(block_memory_bytes=capacity))
    loader = Loader(GatherNode(ShuffleBlockNode(fetch, batch_size=8)))
    drawn = np.concatenate(_epoch(loader, truth))
    assert np.array_equal(np.sort(drawn), np.arange(840))
    slots = fetch.context.block_slots
    assert slots.blocks_outside == 0
    assert 0 < slots.peak_leased_bytes <= slots.capacity_bytes
