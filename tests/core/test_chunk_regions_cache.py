"""`chunk_regions` computes a chunk's regions once per (layout, chunk class) and only
places its rows at `dest_row` afterwards (issue 33): whatever the cache holds, every call
must give what a first call on a fresh layout gives."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.read_plan import ChunkRead, chunk_regions, plan_block
from tests.helpers.strategies import geometries


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y
        for x, y in zip(a, b, strict=True)
    )


@settings(max_examples=60)
@given(
    st.booleans().flatmap(lambda picks: geometries(picks=picks)),
    st.integers(1, 4),
    st.integers(0, 50),
)
def test_cached_regions_are_a_fresh_layouts_placed_at_each_dest_row(
    geometry: SampleGeometry, block_chunks: int, shift: int
) -> None:
    assignment = assign_epoch(
        geometry, np.arange(geometry.num_units), seed=0, epoch=0, rank=0, world_size=1
    )
    for j, start in enumerate(range(0, assignment.units.size, block_chunks)):
        units = assignment.units[start : start + block_chunks]
        plan = plan_block(geometry, units, assignment=assignment, block_index=j)
        for name, layout in geometry.variables.items():
            for read in plan.reads[name]:
                warm = chunk_regions(layout, read)  # earlier blocks filled the cache
                cold = chunk_regions(dataclasses.replace(layout), read)  # a new object
                assert _same(warm[0], cold[0]) and _same(warm[1], cold[1])
                moved = dataclasses.replace(read, dest_row=read.dest_row + shift)
                target, keep = chunk_regions(layout, moved)
                first = warm[0][0]
                assert target[0] == slice(first.start + shift, first.stop + shift)
                assert _same(target[1:], warm[0][1:]) and _same(keep, warm[1])


def test_rows_outside_a_chunk_are_refused_every_time() -> None:
    layout = VariableLayout((10, 7), (4, 3), "int32")
    for _ in range(2):  # a refused class is never cached
        with pytest.raises(ValueError, match=r"rows \(1, 3\) of chunk \(2, 0\).*its 2 rows"):
            chunk_regions(layout, ChunkRead((2, 0), dest_row=0, rows=(1, 3)))
