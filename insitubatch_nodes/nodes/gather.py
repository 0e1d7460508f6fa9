"""GatherNode: turns a batch draw into contiguous arrays, one vectorised take per block."""

from __future__ import annotations

from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.read_plan import ReadPlan
from insitubatch_nodes.items import SAMPLE_INDEX_KEY, BatchDraw


class GatherNode(BaseNode[dict[str, np.ndarray]]):
    """Yields `{variable: (batch, *sample_shape) array, "sample_index": int64 (batch,)}`, or
    with a sample spec `{"group/variable": (batch, steps, *sample_shape), ...}` (the
    sample index is then the anchor's).

    Work is one `np.take` per (field, resident block in the batch), through the plan's
    (anchor, offset) -> buffer row map: it scales with the blocks a batch touches, never
    with its samples. `mode="clip"`: the rows come from a
    permutation of the block, always in range, and numpy's default `mode="raise"` copies
    through a temporary buffer (about 3x slower here).
    """

    SOURCE_KEY = "source"

    def __init__(self, source: BaseNode[BatchDraw]) -> None:
        super().__init__()
        self.source = source

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(None if initial_state is None else initial_state[self.SOURCE_KEY])

    def next(self) -> dict[str, np.ndarray]:
        return gather(next(self.source))

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self.source.state_dict()}


def _fields(plan: ReadPlan) -> list[tuple[str, str, np.ndarray | None]]:
    """`(batch key, variable, offset columns)`; columns `None` means no steps axis."""
    if plan.spec is None:
        return [(name, name, None) for name in plan.reads]
    fields = []
    for key, _, variable, offsets in plan.spec.fields():
        have = plan.offsets[variable]
        fields.append((key, variable, np.array([have.index(o) for o in offsets])))
    return fields


def gather(draw: BatchDraw) -> dict[str, np.ndarray]:
    first_block = draw.parts[0][0]
    fields = _fields(first_block.plan)
    size = draw.size
    out: dict[str, np.ndarray] = {}
    for key, variable, columns in fields:
        sample = first_block.arrays[variable]
        steps = () if columns is None else (columns.size,)
        out[key] = np.empty((size, *steps, *sample.shape[1:]), dtype=sample.dtype)
    out[SAMPLE_INDEX_KEY] = np.empty(size, dtype=np.int64)
    start = 0
    for block, rows in draw.parts:
        stop = start + rows.size
        for key, variable, columns in fields:
            array = block.arrays[variable]
            if columns is None:
                buffer_rows = block.plan.rows[variable][rows, 0]
            else:
                buffer_rows = block.plan.rows[variable][rows[:, None], columns[None, :]].reshape(-1)
            target = out[key][start:stop].reshape(-1, *array.shape[1:])
            np.take(array, buffer_rows, axis=0, out=target, mode="clip")
        np.take(block.plan.sample_index, rows, out=out[SAMPLE_INDEX_KEY][start:stop], mode="clip")
        start = stop
    return out
