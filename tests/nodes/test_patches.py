"""Spatial patches: seeded per sample, tiles cover the grid, only touched chunks are read."""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes import (
    PATCH_ORIGIN_KEY,
    SAMPLE_INDEX_KEY,
    AnchorSet,
    AsyncFetchNode,
    PatchSpec,
    SampleSpec,
    ZarrSource,
    build_loader,
    window,
)
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.patches import touched_chunks
from insitubatch_nodes.core.read_plan import plan_block
from insitubatch_nodes.nodes.gather import crop_rows
from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.tensor_gather import crop_tensor_rows
from tests.helpers.graphs import build_stage
from tests.helpers.resume_check import check_every_cut

GRID_VARIABLES = {
    "tmp": ((40, 20, 30), (2, 6, 7), "float32"),
    "wind": ((40, 3, 20, 30), (4, 2, 6, 7), "int16"),  # (time, level, y, x)
}

cpu_loader = functools.partial(build_loader, device="cpu")  # batches read as numpy


@given(
    st.lists(st.integers(0, 10**6), min_size=1, max_size=40, unique=True),
    st.integers(0, 2**31),
    st.integers(0, 100),
)
def test_random_origins_are_per_sample_and_fit_the_grid(
    anchors: list[int], seed: int, epoch: int
) -> None:
    patches = PatchSpec((5, 7))
    grid = (20, 30)
    ids = np.array(anchors)
    origins = patches.origins(grid, seed, epoch, ids, np.zeros_like(ids))
    assert origins.shape == (len(anchors), 2)
    assert (origins >= 0).all() and (origins[:, 0] <= 15).all() and (origins[:, 1] <= 23).all()
    for i in range(len(anchors)):  # a sample's crop does not depend on the others
        alone = patches.origins(grid, seed, epoch, ids[i : i + 1], np.zeros(1, dtype=np.int64))
        assert np.array_equal(alone[0], origins[i])


def test_random_origins_change_with_the_epoch_and_spread_over_the_grid() -> None:
    patches = PatchSpec((4, 4))
    ids = np.arange(4000)
    a = patches.origins((20, 30), 0, 0, ids, ids * 0)
    b = patches.origins((20, 30), 0, 1, ids, ids * 0)
    assert (a != b).any(axis=1).mean() > 0.9
    assert set(a[:, 0].tolist()) == set(range(17)) and set(a[:, 1].tolist()) == set(range(27))


@given(st.integers(1, 30), st.integers(1, 30), st.data())
def test_tiles_cover_the_grid_with_full_size_crops(g0: int, g1: int, data: st.DataObject) -> None:
    size = (data.draw(st.integers(1, g0)), data.draw(st.integers(1, g1)))
    origins = PatchSpec(size, "tiles").tile_origins((g0, g1))
    covered = np.zeros((g0, g1), dtype=bool)
    for y, x in origins.tolist():
        assert y + size[0] <= g0 and x + size[1] <= g1
        covered[y : y + size[0], x : x + size[1]] = True
    assert covered.all()


@given(st.data())
def test_touched_chunks_are_exactly_those_a_crop_overlaps(data: st.DataObject) -> None:
    grid = (data.draw(st.integers(1, 40)), data.draw(st.integers(1, 40)))
    chunks = (data.draw(st.integers(1, 12)), data.draw(st.integers(1, 12)))
    size = (data.draw(st.integers(1, grid[0])), data.draw(st.integers(1, grid[1])))
    origins = np.array(
        [
            [
                data.draw(st.integers(0, grid[0] - size[0])),
                data.draw(st.integers(0, grid[1] - size[1])),
            ]
            for _ in range(5)
        ]
    )
    touched = touched_chunks(origins, size, chunks, grid)
    counts = (-(-grid[0] // chunks[0]), -(-grid[1] // chunks[1]))
    for (y, x), row in zip(origins.tolist(), touched, strict=True):
        expected = {
            i * counts[1] + j
            for i in range(y // chunks[0], (y + size[0] - 1) // chunks[0] + 1)
            for j in range(x // chunks[1], (x + size[1] - 1) // chunks[1] + 1)
        }
        assert set(row[row >= 0].tolist()) == expected


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 20), st.integers(1, 30), st.integers(1, 3), st.booleans())
def test_a_block_reads_exactly_the_chunks_its_crops_touch(
    h: int, w: int, block_chunks: int, windowed: bool
) -> None:
    layouts = {
        n: VariableLayout(shape, chunks, dtype)
        for n, (shape, chunks, dtype) in GRID_VARIABLES.items()
    }
    geometry = SampleGeometry.from_layouts(layouts)
    spec = SampleSpec({"x": window(["tmp", "wind"], steps=2)}) if windowed else None
    anchors = AnchorSet.for_split(geometry, np.arange(geometry.num_units), spec, PatchSpec((h, w)))
    assignment = assign_epoch(anchors, anchors.units, seed=1, epoch=2, rank=0, world_size=1)
    units = assignment.units[:block_chunks]
    plan = plan_block(anchors, units, assignment=assignment, block_index=0)
    assert plan.origins is not None
    for name, layout in layouts.items():
        offsets = np.array(plan.offsets[name])
        expected = set()
        for t, (y, x) in zip(plan.sample_index.tolist(), plan.origins.tolist(), strict=True):
            for step in (t + offsets).tolist():
                for i in range(y // 6, (y + h - 1) // 6 + 1):
                    for j in range(x // 7, (x + w - 1) // 7 + 1):
                        middle = [(lc,) for lc in range(2)] if name == "wind" else [()]
                        expected.update((step // layout.sample_chunk, *m, i, j) for m in middle)
        got = [r.coords for r in plan.reads[name]]
        assert len(got) == len(set(got)) and set(got) == expected


def _fetch(loader: Any) -> AsyncFetchNode:
    return next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))


def test_random_patches_hold_the_stored_values_and_read_less(memory_url: Any) -> None:
    url, truth = memory_url(GRID_VARIABLES)
    spec = SampleSpec({"x": window(["tmp", "wind"], steps=2)})
    loader = cpu_loader(
        url, split="all", spec=spec, patches=PatchSpec((5, 8)), batch_size=6, seed=3
    )
    seen: Counter[int] = Counter()
    for batch in loader:
        anchors = batch[SAMPLE_INDEX_KEY].numpy()
        origins = batch[PATCH_ORIGIN_KEY].numpy()
        seen.update(anchors.tolist())
        assert batch["x/tmp"].shape == (anchors.size, 2, 5, 8)
        assert batch["x/wind"].shape == (anchors.size, 2, 3, 5, 8)
        for i, (t, (y, x)) in enumerate(zip(anchors.tolist(), origins.tolist(), strict=True)):
            for name in ("tmp", "wind"):
                expected = truth[name][[t - 1, t], ..., y : y + 5, x : x + 8]
                assert np.array_equal(batch[f"x/{name}"][i].numpy(), expected)
    assert sorted(seen) == list(range(1, 40))
    whole = cpu_loader(url, split="all", spec=spec, batch_size=6, seed=3)
    list(whole)
    assert _fetch(loader).stats.chunks_read < _fetch(whole).stats.chunks_read / 2


def test_tiles_give_every_anchor_every_tile_once(memory_url: Any) -> None:
    url, truth = memory_url(GRID_VARIABLES)
    patches = PatchSpec((8, 12), "tiles")  # grid 20 x 30 -> origins y 0, 8, 12; x 0, 12, 18
    loader = cpu_loader(url, ["tmp"], split="val", patches=patches, batch_size=7)
    source = ZarrSource.open(url, ["tmp"])
    steps = source.geometry.unit_samples(source.split_units("val")).tolist()
    seen: Counter[tuple[int, int, int]] = Counter()
    for batch in loader:
        for t, (y, x), crop in zip(
            batch[SAMPLE_INDEX_KEY].tolist(),
            batch[PATCH_ORIGIN_KEY].tolist(),
            batch["tmp"].numpy(),
            strict=True,
        ):
            seen[(t, y, x)] += 1
            assert np.array_equal(crop, truth["tmp"][t, y : y + 8, x : x + 12])
    tiles = {(y, x) for y in (0, 8, 12) for x in (0, 12, 18)}
    assert set(seen) == {(t, y, x) for t in steps for y, x in tiles}
    assert set(seen.values()) == {1}


def test_a_region_is_the_same_crop_for_every_sample_and_reads_only_its_chunks(
    memory_url: Any,
) -> None:
    url, truth = memory_url(GRID_VARIABLES)
    region = PatchSpec((6, 9), "region", origin=(3, 20))  # grid 20 x 30
    loader = cpu_loader(url, ["tmp"], split="all", patches=region, batch_size=6, seed=3)
    for batch in loader:
        assert (batch[PATCH_ORIGIN_KEY].numpy() == [3, 20]).all()
        for t, crop in zip(batch[SAMPLE_INDEX_KEY].tolist(), batch["tmp"].numpy(), strict=True):
            assert np.array_equal(crop, truth["tmp"][t, 3:9, 20:29])
    whole = cpu_loader(url, ["tmp"], split="all", batch_size=6, seed=3)
    list(whole)
    assert _fetch(loader).stats.chunks_read < _fetch(whole).stats.chunks_read
    with pytest.raises(ValueError, match=r"reaches past the grid \(20, 30\)"):
        cpu_loader(url, ["tmp"], split="all", patches=PatchSpec((6, 9), "region", origin=(15, 0)))
    with pytest.raises(ValueError, match="needs origin="):
        PatchSpec((6, 9), "region")
    with pytest.raises(ValueError, match="origin= is for mode='region' only"):
        PatchSpec((6, 9), origin=(0, 0))


@pytest.mark.parametrize("stage", ["plan", "gather", "device"])
def test_patched_stages_resume_at_every_cut(memory_url: Any, stage: str) -> None:
    url, _ = memory_url(GRID_VARIABLES)
    spec = SampleSpec({"x": window(["tmp", "wind"], steps=2)})
    check_every_cut(
        lambda: build_stage(
            url, stage, split="train", spec=spec, patches=PatchSpec((6, 6)), batch_size=5
        )
    )


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_tensor_crops_are_the_numpy_crops(data: st.DataObject) -> None:
    """The device gather's crops (GPU decode with patches) take exactly what the host
    gather's take, axes between the sample axis and the cropped ones included."""
    grid = data.draw(st.lists(st.integers(1, 7), min_size=1, max_size=2))
    middle = data.draw(st.lists(st.integers(1, 3), max_size=2))
    length = data.draw(st.integers(1, 8))
    n, steps = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 3))
    size = tuple(data.draw(st.integers(1, g)) for g in grid)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    block = rng.standard_normal((length, *middle, *grid)).astype(np.float32)
    rows = rng.integers(0, length, size=(n, steps))
    origins = np.stack(
        [rng.integers(0, g - s + 1, size=n) for g, s in zip(grid, size, strict=True)], axis=1
    )
    on_host = crop_rows(block, rows, origins, size)
    on_device = crop_tensor_rows(
        torch.from_numpy(block), torch.from_numpy(rows), torch.from_numpy(origins), size
    )
    assert on_host.shape == (n, steps, *middle, *size)
    np.testing.assert_array_equal(on_device.numpy(), on_host)
