"""Strides that do not divide the chunking, against xarray: on stores written by
`Dataset.to_zarr` (v2 and v3) chunked 1, 4, 5 or 24 steps along time, `stride=2/3/6/24`
yields as anchors exactly the steps `ds.isel(time=slice(None, None, k))` keeps inside the
split (the same split as the loader without a stride), with xarray's values, each once an
epoch across the ranks (training pads as the ranks' rule says, evaluation yields each
once), windows and leads counted in strides, and resume exact at every cut. The loader
deals such strides in units that hold equally many anchors (`core.stride_units`) and says
which in its log, in `insitubatch inspect` and in its state."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from hypothesis import assume, given
from hypothesis import strategies as st

import insitubatch_nodes as ib
from insitubatch_nodes.builder import split_anchors as split_anchors_module
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import SplitManifest, make_manifest
from insitubatch_nodes.core.stride_units import StrideUnits, stride_units
from tests.helpers.batches import as_numpy, batch_key, recorded_unit_grid
from tests.helpers.profiles import loader_property
from tests.helpers.resume_check import check_every_cut
from tests.helpers.stores import write_store
from tests.helpers.time_stores import hourly, write_xarray

STRIDES = (2, 3, 6, 24)
CHUNKINGS = (1, 4, 5, 24)
VARIABLES = ("t2m", "z")
SPEC = ib.SampleSpec({"x": ib.window(["t2m"], steps=2), "y": ib.leads(["t2m"], [1])})


class Stores:
    """Stores written by xarray, one per (steps, chunking, zarr format), written once
    for the module and opened once by xarray (the reference)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.written: dict[tuple[int, int, int], tuple[str, xr.Dataset]] = {}

    def get(self, steps: int, chunk: int, zarr_format: int) -> tuple[str, xr.Dataset]:
        key = (steps, chunk, zarr_format)
        if key not in self.written:
            path = self.folder / f"s{steps}-c{chunk}-v{zarr_format}.zarr"
            times = hourly("2015-01-01T00", steps)
            url = write_xarray(path, times, zarr_format=zarr_format, steps_per_chunk=chunk)
            self.written[key] = (url, xr.open_zarr(url, consolidated=False).load())
        return self.written[key]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stores]:
    made = Stores(tmp_path_factory.mktemp("strided"))
    yield made
    for _, ds in made.written.values():
        ds.close()


def grid_of(steps: int, chunk: int) -> SampleGeometry:
    """The unit grid of a store `write_xarray` writes, known without opening it."""
    return SampleGeometry.from_layouts(
        {
            "t2m": VariableLayout((steps, 3, 4), (chunk, 3, 4), "float32"),
            "z": VariableLayout((steps, 7, 3, 4), (chunk, 2, 3, 4), "float32"),
        }
    )


def kept_by_xarray(ds: xr.Dataset, stride: int, split_steps: np.ndarray) -> np.ndarray:
    """The steps `ds.isel(time=slice(None, None, stride))` keeps, inside the split."""
    kept_dates = ds.isel(time=slice(None, None, stride)).time.values
    positions = np.flatnonzero(np.isin(ds.time.values, kept_dates))
    inside = np.zeros(ds.sizes["time"], dtype=bool)
    for start, stop in split_steps.tolist():
        inside[start:stop] = True
    return positions[inside[positions]]


def epoch_of(loader: ib.Loader) -> list[dict[str, np.ndarray]]:
    return [{k: as_numpy(v).copy() for k, v in batch.items()} for batch in loader]


def assert_values_are_xarrays(batches: list[dict[str, np.ndarray]], ds: xr.Dataset) -> None:
    for batch in batches:
        steps = batch["sample_index"]
        for name in VARIABLES:
            assert np.array_equal(batch[name], ds[name].isel(time=steps).values), name


@st.composite
def fractions(draw: st.DrawFn) -> dict[str, float]:
    """Two or three contiguous splits with shares in tenths."""
    tenths = draw(st.lists(st.integers(1, 8), min_size=2, max_size=3).filter(lambda t: sum(t) < 10))
    shares = [*tenths, 10 - sum(tenths)]
    names = ["train", "val", "test", "extra"][: len(shares)]
    return {name: share / 10 for name, share in zip(names, shares, strict=True)}


@loader_property(40)
@given(
    stride=st.sampled_from(STRIDES),
    chunk=st.sampled_from(CHUNKINGS),
    steps=st.integers(48, 150),
    zarr_format=st.sampled_from([2, 3]),
    cut=fractions(),
    evaluation=st.booleans(),
    batch_size=st.integers(1, 8),
    data=st.data(),
)
def test_a_stride_yields_the_steps_xarray_keeps_inside_the_split(
    stores: Stores,
    stride: int,
    chunk: int,
    steps: int,
    zarr_format: int,
    cut: dict[str, float],
    evaluation: bool,
    batch_size: int,
    data: st.DataObject,
) -> None:
    grid = grid_of(steps, chunk)
    manifest = make_manifest(grid, cut, allow_empty=True)
    split = data.draw(st.sampled_from([n for n, r in manifest.splits.items() if r]))
    expected = steps_kept(manifest, split, steps, stride)
    assume(expected.size > 0)
    units = stride_units(grid.unit_length, stride).unit_steps
    world_size = data.draw(st.integers(1, min(3, np.unique(expected // units).size)))
    check_strided_epoch(
        stores,
        Strided(stride, chunk, steps, zarr_format, manifest, split),
        world_size=world_size,
        evaluation=evaluation,
        batch_size=batch_size,
    )


def test_two_short_units_on_three_ranks_pad_at_most_a_unit(stores: Stores) -> None:
    """A case the property found: units of 10 steps hold 5 anchors, split "test"'s edges 2
    and 3, on 3 ranks; the ranks held 18, 15 and 12 anchors, and the third padded 6, more
    than a unit, until the short units went to the smallest share."""
    grid = grid_of(115, 5)
    manifest = make_manifest(grid, {"train": 0.1, "val": 0.1, "test": 0.8}, allow_empty=True)
    check_strided_epoch(
        stores,
        Strided(2, 5, 115, 3, manifest, "test"),
        world_size=3,
        evaluation=False,
        batch_size=1,
    )


def steps_kept(manifest: SplitManifest, split: str, steps: int, stride: int) -> np.ndarray:
    """The steps a stride keeps inside the split."""
    kept = np.flatnonzero(np.arange(steps) % stride == 0)
    inside = np.concatenate([np.arange(a, b) for a, b in manifest.step_ranges(split)])
    return kept[np.isin(kept, inside)]


@dataclass(frozen=True)
class Strided:
    """A strided split of one of the module's stores."""

    stride: int
    chunk: int
    steps: int
    zarr_format: int
    manifest: SplitManifest
    split: str


def check_strided_epoch(
    stores: Stores, case: Strided, *, world_size: int, evaluation: bool, batch_size: int
) -> None:
    """One epoch on every rank against xarray: the anchors `isel` keeps, its values, each
    once across the ranks in evaluation, and in training equal counts with at most a
    unit's pads per rank."""
    stride, split, manifest = case.stride, case.split, case.manifest
    expected = steps_kept(manifest, split, case.steps, stride)
    units = stride_units(grid_of(case.steps, case.chunk).unit_length, stride).unit_steps
    url, ds = stores.get(case.steps, case.chunk, case.zarr_format)
    assert np.array_equal(kept_by_xarray(ds, stride, manifest.step_ranges(split)), expected)
    settings: dict[str, Any] = {
        "split": split,
        "manifest": manifest,
        "batch_size": batch_size,
        "device": "cpu",
        "seed": 3,
        "world_size": world_size,
        "evaluation": evaluation,
    }
    without = ib.build_loader(url, **{**settings, "world_size": 1, "evaluation": True})
    plain = np.concatenate([b["sample_index"] for b in epoch_of(without)])
    assert np.array_equal(plain[plain % stride == 0], expected)  # the stride-less split's
    per_rank = []
    for rank in range(world_size):
        loader = ib.build_loader(url, VARIABLES, stride=stride, rank=rank, **settings)
        batches = epoch_of(loader)
        assert len(batches) == len(loader)
        assert_values_are_xarrays(batches, ds)
        per_rank.append(np.concatenate([b["sample_index"] for b in batches]))
    if evaluation:  # every anchor once, the ranks' shares end to end in order
        assert np.array_equal(np.concatenate(per_rank), expected)
        return
    counts = Counter(np.concatenate(per_rank).tolist())
    assert sorted(counts) == expected.tolist()
    assert len({share.size for share in per_rank}) == 1  # the ranks step together
    own = [np.unique(share) for share in per_rank]
    assert sum(mine.size for mine in own) == expected.size  # no rank draws another's
    fullest_unit = np.unique(expected // units, return_counts=True)[1].max()
    for share, mine in zip(per_rank, own, strict=True):  # pads: at most a unit's worth
        assert share.size - mine.size <= fullest_unit


@pytest.mark.parametrize(("k", "chunk"), [(3, 4), (6, 4), (2, 5), (24, 5), (3, 24)])
def test_windows_and_leads_count_strides_on_any_chunking(
    stores: Stores, k: int, chunk: int
) -> None:
    """A window of 2 and a lead of 1 are t - k, t -> t + k, xarray's values at those
    steps, and never leave the split."""
    steps = 240 if chunk == 24 else 120  # the default fractions need 10 units
    url, ds = stores.get(steps, chunk, 3)
    grid = grid_of(steps, chunk)
    manifest = make_manifest(grid)
    for split in ("train", "val"):
        split_steps = manifest.step_ranges(split)
        inside = set(np.concatenate([np.arange(a, b) for a, b in split_steps]).tolist())
        expected = [t for t in sorted(inside) if t % k == 0 and {t - k, t + k} <= inside]
        settings: dict[str, Any] = {"spec": SPEC, "split": split, "stride": k, "seed": 1}
        if not expected:  # windows too long for the split: refused, as on any grid
            with pytest.raises(ValueError, match=f"split {split!r} has no anchor"):
                ib.build_loader(url, batch_size=3, device="cpu", **settings)
            continue
        loader = ib.build_loader(url, batch_size=3, device="cpu", **settings)
        anchors = []
        for batch in epoch_of(loader):
            t = batch["sample_index"]
            anchors.append(t)
            want_x = ds.t2m.isel(time=np.stack([t - k, t], axis=1).reshape(-1)).values
            assert np.array_equal(batch["x/t2m"], want_x.reshape(t.size, 2, 3, 4))
            assert np.array_equal(batch["y/t2m"][:, 0], ds.t2m.isel(time=t + k).values)
        assert sorted(np.concatenate(anchors).tolist()) == expected


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_date_splits_keep_their_boundaries_inside_the_longer_units(
    stores: Stores, zarr_format: int
) -> None:
    """A stride of 3 on chunks of 4 is dealt in units of 12 steps; a date boundary inside
    one (step 50) leaves each split its own anchors there, as `ds.sel` cuts them."""
    url, ds = stores.get(120, 4, zarr_format)
    splits = {"train": ("2015-01-01", "2015-01-03T01"), "val": ("2015-01-03T02", "2015")}
    for split, (first, last) in splits.items():
        loader = ib.build_loader(
            url, split=split, splits=splits, stride=3, batch_size=4, device="cpu", evaluation=True
        )
        got = np.concatenate([b["sample_index"] for b in epoch_of(loader)])
        kept = ds.isel(time=slice(None, None, 3)).sel(time=slice(first, last)).time.values
        assert np.array_equal(ds.time.values[got], kept)


def test_frequency_6h_on_an_hourly_store_chunked_4(stores: Stores) -> None:
    """`frequency="6h"` is a stride of 6 there, longer than a chunk: units of 4 steps,
    each holding one anchor or none, anchored on the dates xarray keeps every 6 h."""
    url, ds = stores.get(120, 4, 3)
    settings: dict[str, Any] = {"spec": SPEC, "split": "all", "batch_size": 4, "device": "cpu"}
    by_frequency = ib.build_loader(url, frequency="6h", **settings)
    by_stride = ib.build_loader(url, stride=6, **settings)
    assert [batch_key(b) for b in by_frequency] == [batch_key(b) for b in by_stride]
    anchors = np.sort(np.concatenate([b["sample_index"].numpy() for b in by_frequency]))
    six_hourly = ds.time.values[::6]
    assert np.array_equal(ds.time.values[anchors], six_hourly[1:-1])  # a window and a lead
    assert recorded_unit_grid(by_frequency.state_dict()) == {"unit_steps": 4, "revisits": 1}


@pytest.mark.parametrize(
    ("stride", "chunk", "spec", "world_size"),
    [(3, 4, None, 2), (6, 4, SPEC, 1), (2, 5, SPEC, 2)],
)
def test_resume_is_exact_at_every_cut(
    stores: Stores, stride: int, chunk: int, spec: ib.SampleSpec | None, world_size: int
) -> None:
    url, _ = stores.get(96, chunk, 3)
    for rank in range(world_size):
        check_every_cut(
            lambda rank=rank: (
                ib.build_loader(
                    url,
                    split="train",
                    spec=spec,
                    stride=stride,
                    batch_size=3,
                    block_chunks=2,
                    device="cpu",
                    rank=rank,
                    world_size=world_size,
                ).root
            )
        )


def test_the_choice_is_logged_kept_in_the_state_and_another_refused(
    stores: Stores, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = stores.get(120, 4, 3)
    settings: dict[str, Any] = {"stride": 3, "batch_size": 4, "device": "cpu"}
    with caplog.at_level(logging.INFO, logger="insitubatch_nodes.builder"):
        loader = ib.build_loader(url, **settings)
    assert "stride: units of 12 steps: a stride of 3 steps does not divide units of 4" in (
        caplog.text
    )
    iterator = iter(loader)
    next(iterator)
    state = json.loads(json.dumps(loader.state_dict()))
    assert recorded_unit_grid(state) == {"unit_steps": 12, "revisits": 1}

    def whole_grid(grid_steps: int, stride: int, revisits: int) -> StrideUnits:  # never longer
        return StrideUnits(stride, grid_steps, grid_steps, "fits", revisits)

    monkeypatch.setattr(split_anchors_module, "stride_units", whole_grid)
    other = ib.build_loader(url, **settings)
    other.load_state_dict(state)
    with pytest.raises(
        ValueError,
        match=r"unit_grid=\{'unit_steps': 12, 'revisits': 1\}.* but this graph has "
        r".*unit_grid=\{'unit_steps': 4, 'revisits': 1\}",
    ):
        next(iter(other))


def test_a_split_too_small_for_the_longer_units_and_the_ranks_is_refused(
    stores: Stores,
) -> None:
    """Units of 12 steps (a stride of 3 on chunks of 4) leave a split of 12 steps one
    unit: two ranks cannot share it, as on any grid."""
    url, _ = stores.get(120, 4, 3)
    manifest = SplitManifest.from_json(
        {**make_manifest(grid_of(120, 4)).to_json(), "splits": {"a": [[0, 3]], "b": [[3, 30]]}}
    )
    settings: dict[str, Any] = {"split": "a", "manifest": manifest, "device": "cpu"}
    ib.build_loader(url, world_size=2, rank=0, **settings)  # without a stride: 3 units
    with pytest.raises(ValueError, match=r"the split has 1 chunk-aligned units, fewer than"):
        ib.build_loader(url, stride=3, world_size=2, rank=0, **settings)


def test_a_budget_too_small_for_the_longer_units_names_them_and_the_revisits_that_fit(
    stores: Stores,
) -> None:
    """A stride of 5 on chunks of 24 is dealt in units of 120 steps, five chunks each; a
    budget that holds units of one chunk but not of five is refused naming the units and
    the revisits that deal the stride in visits of 4 steps instead, which then fit."""
    url, ds = stores.get(480, 24, 3)
    settings: dict[str, Any] = {"split": "all", "batch_size": 4, "device": "cpu"}
    budget = 1 << 18
    ib.build_loader(url, memory_budget=budget, **settings)  # without a stride: it fits
    with pytest.raises(
        ValueError,
        match=r"memory_budget=262144 bytes is too small: .* \(a stride of 5 steps is dealt in "
        r"units of 120 steps, 5x the memory of a unit of 24; revisits=6 deals it in units "
        r"of 4 steps, one anchor or none each, for less memory and more reads\)",
    ):
        ib.build_loader(url, stride=5, memory_budget=budget, **settings)
    loader = ib.build_loader(url, stride=5, revisits=6, memory_budget=budget, **settings)
    batches = epoch_of(loader)
    assert_values_are_xarrays(batches, ds)
    anchors = np.sort(np.concatenate([b["sample_index"] for b in batches]))
    assert np.array_equal(anchors, kept_by_xarray(ds, 5, np.array([[0, 480]])))
    assert recorded_unit_grid(loader.state_dict()) == {"unit_steps": 4, "revisits": 6}


@pytest.mark.parametrize("stride", [3, 4, 9])
def test_a_stride_on_the_fine_grid_of_variables_chunked_5_7_and_12(
    tmp_path: Path, stride: int
) -> None:
    """Variables chunked 5, 7 and 12 steps (written by zarr-python) split on the fine grid
    of 5 steps; a stride of 3 is dealt in units of 15 steps, across chunks of 7 and 12.
    Each split's anchors are its stride steps whose window stays inside it, once across
    two ranks, with the stored values."""
    layouts = {
        "a": ((840, 3, 4), (5, 3, 4), "float32"),
        "b": ((840, 2), (7, 2), "int16"),
        "c": ((840, 1), (12, 1), "float32"),
    }
    url, truth = write_store(tmp_path / "store.zarr", layouts)
    spec = ib.SampleSpec({"x": ib.window(["a", "b", "c"], steps=2)})
    for split in ("train", "val", "test"):
        steps = ib.ZarrSource.open(url).step_ranges(split)
        inside = set(np.concatenate([np.arange(a, b) for a, b in steps]).tolist())
        expected = [t for t in sorted(inside) if t % stride == 0 and t - stride in inside]
        drawn = []
        for rank in range(2):
            loader = ib.build_loader(
                url,
                spec=spec,
                split=split,
                stride=stride,
                batch_size=5,
                device="cpu",
                rank=rank,
                world_size=2,
                evaluation=True,
            )
            for batch in epoch_of(loader):
                t = batch["sample_index"]
                for name, values in truth.items():
                    want = values[np.stack([t - stride, t], axis=1)]
                    assert np.array_equal(batch[f"x/{name}"], want), name
                drawn.append(t)
        assert np.concatenate(drawn).tolist() == expected, split


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_dataset_taking_every_third_step_of_chunks_of_4(stores: Stores, zarr_format: int) -> None:
    """`build_loader(ds.isel(time=slice(0, None, 3)))` on a store chunked 4 steps was
    refused with the stride; it yields the Dataset's steps and values."""
    url, ds = stores.get(120, 4, zarr_format)
    opened = xr.open_zarr(url, consolidated=False)
    taken = opened.isel(time=slice(0, None, 3))
    loader = ib.build_loader(taken, split="train", batch_size=4, device="cpu", evaluation=True)
    batches = epoch_of(loader)
    assert_values_are_xarrays(batches, ds)
    got = np.concatenate([b["sample_index"] for b in batches])
    assert np.array_equal(ds.time.values[got], taken.time.values)
