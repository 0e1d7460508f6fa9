"""The static fields' index math (`core.static_fields`): the whole-array read plan places
every element of an array once, whatever its chunking; a crop at each sample's origin is
what slicing gives; the spec's statics are split from its fields, and placed as the module
says."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.patches import PatchSpec
from insitubatch_nodes.core.read_plan import chunk_regions
from insitubatch_nodes.core.sample_spec import SampleSpec, leads, window
from insitubatch_nodes.core.static_fields import (
    StaticPlacement,
    crop_positions,
    fields_spec,
    region_cut,
    region_shape,
    sample_crop_size,
    static_copy_nbytes,
    static_placements,
    whole_array_plan,
)


@given(
    shape=st.lists(st.integers(1, 9), min_size=1, max_size=3),
    data=st.data(),
)
def test_the_whole_array_plan_places_every_element_once(
    shape: list[int], data: st.DataObject
) -> None:
    chunks = tuple(data.draw(st.integers(1, s + 2)) for s in shape)
    layout = VariableLayout(tuple(shape), chunks, "float32")
    plan = whole_array_plan({"s": layout})
    assert plan.buffer_rows["s"] == shape[0]
    stored = np.arange(np.prod(shape)).reshape(shape)
    filled = np.zeros(shape, dtype=np.int64)
    placed = np.zeros(shape, dtype=np.int64)
    for read in plan.reads["s"]:
        target, keep = chunk_regions(layout, read)
        region = layout.chunk_selection(read.coords)
        padded = np.zeros(chunks, dtype=np.int64)  # a stored chunk, edge ones padded
        valid = stored[region]
        padded[tuple(slice(0, n) for n in valid.shape)] = valid
        filled[target] = padded[keep]
        placed[target] += 1
    assert (placed == 1).all()
    assert np.array_equal(filled, stored)


@given(
    grid=st.tuples(st.integers(1, 7), st.integers(1, 7)),
    samples=st.integers(1, 5),
    data=st.data(),
)
def test_a_crop_at_each_origin_is_what_slicing_gives(
    grid: tuple[int, int], samples: int, data: st.DataObject
) -> None:
    size = (data.draw(st.integers(1, grid[0])), data.draw(st.integers(1, grid[1])))
    origins = np.array(
        [
            [data.draw(st.integers(0, g - s)) for g, s in zip(grid, size, strict=True)]
            for _ in range(samples)
        ]
    )
    static = np.arange(grid[0] * grid[1], dtype=np.float32).reshape(grid)
    cropped = static[(Ellipsis, *crop_positions(origins, size))]
    for k, (a, b) in enumerate(origins):
        assert np.array_equal(cropped[k], static[a : a + size[0], b : b + size[1]])


def test_a_spec_samples_its_fields_and_places_its_statics_in_the_groups_naming_them() -> None:
    spec = SampleSpec(
        {"inputs": window(["t2m", "lsm", "z"], steps=2), "targets": leads(["t2m"], [1])}
    )
    assert fields_spec(spec, ["lsm", "z"]) == SampleSpec(
        {"inputs": window(["t2m"], steps=2), "targets": leads(["t2m"], [1])}
    )
    placements = static_placements(spec, ["lsm", "z", "orog"], "fields")
    assert placements == [
        StaticPlacement("inputs/lsm", "lsm", 2, "inputs"),
        StaticPlacement("inputs/z", "z", 2, "inputs"),
        StaticPlacement("orog", "orog", None, None),  # named by no group: its own key
    ]
    assert static_placements(None, ["lsm"], "fields") == [
        StaticPlacement("lsm", "lsm", None, "fields")
    ]
    with pytest.raises(ValueError, match="group 'c' names only static fields"):
        fields_spec(SampleSpec({"i": window(["t2m"], 1), "c": window(["lsm"], 1)}), ["lsm"])


def test_copies_are_counted_where_a_batch_holds_them() -> None:
    shapes = {"lsm": ((4, 8), "float64")}
    grouped = static_placements(
        SampleSpec({"inputs": window(["t2m", "lsm"], steps=3)}), ["lsm"], "fields"
    )
    assert static_copy_nbytes(grouped, shapes, stacked=False, patch_size=None) == 0  # a view
    assert static_copy_nbytes(grouped, shapes, stacked=True, patch_size=None) == 3 * 32 * 8
    assert static_copy_nbytes(grouped, shapes, stacked=False, patch_size=(2, 2)) == 4 * 8
    assert static_copy_nbytes(grouped, shapes, stacked=True, patch_size=(2, 2)) == 3 * 4 * 8


@given(
    st.integers(1, 6),
    st.integers(1, 6),
    st.integers(0, 5),
    st.integers(0, 5),
    st.integers(1, 3),
)
def test_a_region_is_cut_once_as_every_sample_crops_it(
    rows: int, cols: int, top: int, left: int, levels: int
) -> None:
    grid = (top + rows + 1, left + cols + 2)
    values = np.arange(levels * grid[0] * grid[1]).reshape(levels, *grid)
    region = PatchSpec((rows, cols), mode="region", origin=(top, left))
    cut = region_cut(values, region)
    assert np.array_equal(cut, values[:, top : top + rows, left : left + cols])
    assert np.shares_memory(cut, values)  # a view: nothing copied
    assert cut.shape == region_shape(values.shape, region)
    assert sample_crop_size(region) is None  # nothing left to crop per sample
    random = PatchSpec((rows, cols))
    assert region_cut(values, random) is values
    assert region_shape(values.shape, random) == values.shape
    assert sample_crop_size(random) == (rows, cols)
    assert sample_crop_size(None) is None and region_cut(values, None) is values
