"""`read_plan.chunk_rows_read`, counted per variable with array operations, gives what
counting chunk by chunk gives: edge chunks clipped, kept row ranges, 1-D and 3-D arrays."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.read_plan import ChunkRead, chunk_rows_read


def _chunk_by_chunk(plan: Any, layouts: dict[str, VariableLayout]) -> tuple[int, int]:
    decoded = kept = 0
    for name, reads in plan.reads.items():
        layout = layouts[name]
        itemsize = np.dtype(layout.dtype).itemsize
        for read in reads:
            selection = layout.chunk_selection(read.coords)
            row = itemsize * math.prod(s.stop - s.start for s in selection[1:])
            valid = selection[0].stop - selection[0].start
            decoded += valid * row
            kept += (valid if read.rows is None else read.rows[1] - read.rows[0]) * row
    return decoded, kept


@settings(max_examples=60, deadline=None)
@given(data=st.data(), ndim=st.integers(1, 3), reads=st.integers(0, 12))
def test_the_counts_are_those_of_a_chunk_by_chunk_count(
    data: st.DataObject, ndim: int, reads: int
) -> None:
    shape = tuple(data.draw(st.integers(1, 20)) for _ in range(ndim))
    chunks = tuple(data.draw(st.integers(1, s)) for s in shape)
    layout = VariableLayout(shape, chunks, data.draw(st.sampled_from(["float32", "int16"])))
    grid = [math.ceil(s / c) for s, c in zip(shape, chunks, strict=True)]
    made = []
    for _ in range(reads):
        coords = tuple(data.draw(st.integers(0, g - 1)) for g in grid)
        valid = min(chunks[0], shape[0] - coords[0] * chunks[0])
        rows = None
        if data.draw(st.booleans()):
            start = data.draw(st.integers(0, valid - 1))
            rows = (start, data.draw(st.integers(start + 1, valid)))
        made.append(ChunkRead(coords, 0, rows))
    plan = SimpleNamespace(reads={"a": tuple(made), "empty": ()})
    layouts = {"a": layout, "empty": layout}
    assert chunk_rows_read(plan, layouts) == _chunk_by_chunk(plan, layouts)  # type: ignore[arg-type]
