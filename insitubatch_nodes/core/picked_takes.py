"""The one take that reads a field from a block whose picks its batch holds in another order.

A block keeps each picked position once and sorted, so that a read needs only the chunks
holding one (`core.read_plan.chunk_regions`); a batch holds them as asked: levels in the
order written, an area's columns eastward from its west edge (across the seam, the stored
end first, then the start: `core.area`). Reordering after the take would copy the batch
twice. Instead the take reads the block through a view whose rows are what lies after
the last reordered axis, at the rows that list each sample's positions in the batch's
order (index arithmetic over samples times positions, never a step per sample).

When the last axis itself is reordered (an area's columns across the seam), rows of
single values would need an index as large as the batch, 8 bytes per value. The take then
reads the block as rows of that axis (`columns`: the axis's positions in the batch's
order). An area's columns are a few runs of neighbouring positions (two across the seam:
the stored end, then the start), so the take copies each run with one take of its rows
(`column_runs`), which moves whole runs of values as a plain take does; a fancy index of
rows by columns, broadcast, moved them one at a time (13 times slower on a 60 x 120 box).
An order of many short runs (levels on the last axis, `spatial_dims=0`) takes that fancy
index: still one take, its index arrays only as long as the rows and the axis. Crops
(patches) index their axes through the same positions (`crop_lookups`), so a crop of a
box across the seam is the batch's crop, not the store's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitubatch_nodes.core.axis_pick import AxisPick

MAX_COLUMN_RUNS = 4  # this many runs or more of a reordered last axis: one fancy index instead


@dataclass(frozen=True)
class PickedTake:
    """How a field's take reads a block of `block_shape` whose `picks` its batch reorders.

    Args:
        block_shape: the block array's shape (rows first).
        picks: the variable's picks a batch holds in another order than the block
            (`ReadPlan.reordered`), on distinct axes.
        crop: the patch's size along the cropped (last) axes, or () for none.
    """

    block_shape: tuple[int, ...]
    picks: tuple[AxisPick, ...]
    crop: tuple[int, ...] = ()

    @property
    def _first_cropped(self) -> int:
        return len(self.block_shape) - len(self.crop)

    @property
    def _reordered(self) -> dict[int, AxisPick]:
        return {pick.axis: pick for pick in self.picks}

    @property
    def columns(self) -> np.ndarray | None:
        """The last axis's block positions in the batch's order, when it is reordered and
        not cropped (the take's second index); None otherwise."""
        last = len(self.block_shape) - 1
        pick = self._reordered.get(last)
        if pick is None or self.crop:
            return None
        return np.asarray(pick.places, dtype=np.int64)

    def column_runs(self) -> tuple[tuple[int, int, int], ...] | None:
        """`columns` as runs of neighbouring block positions, `(first, stop, batch
        position of first)` each, when there are fewer than `MAX_COLUMN_RUNS` of them (an
        area's columns: one run, or two across the seam); None otherwise (or without
        `columns`)."""
        columns = self.columns
        if columns is None:
            return None
        breaks = np.flatnonzero(np.diff(columns) != 1) + 1
        if breaks.size + 1 >= MAX_COLUMN_RUNS:
            return None
        starts = np.r_[0, breaks]
        stops = np.r_[breaks, columns.size]
        return tuple(
            (int(columns[a]), int(columns[a]) + int(b - a), int(a))
            for a, b in zip(starts.tolist(), stops.tolist(), strict=True)
        )

    @property
    def folded(self) -> int:
        """The last block axis folded into the take's rows (0: none, the block's own rows)."""
        uncropped = [a for a in self._reordered if a < self._first_cropped]
        if self.columns is not None:
            return len(self.block_shape) - 2
        return max(uncropped, default=0)

    def view(self, array: Any) -> Any:
        """The block array (numpy or a tensor) as the rows the take reads:
        `(-1, *array.shape[folded + 1:])`, a view of the block's contiguous memory.

        Args:
            array: the block array (rows first).
        """
        return array.reshape(-1, *array.shape[self.folded + 1 :])

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """The rows of `view` holding the samples at block rows `rows`, the folded axes in
        the batch's order: `(*rows.shape, *batch lengths of axes 1..folded)`.

        Args:
            rows: block rows of the samples (or of their steps), any shape.
        """
        folded = self.folded
        mesh = np.zeros((), dtype=np.int64)
        for axis in range(1, folded + 1):
            stride = math.prod(self.block_shape[axis + 1 : folded + 1])
            mesh = mesh[..., None] + self._positions(axis) * stride
        per_row = math.prod(self.block_shape[1 : folded + 1])
        flat = np.asarray(rows, dtype=np.int64)
        return flat.reshape(*flat.shape, *([1] * folded)) * per_row + mesh

    def crop_lookups(self) -> tuple[np.ndarray | None, ...]:
        """Per cropped axis, the block positions of the batch's positions along it (a crop
        at batch positions `o..o+size` reads block positions `lookup[o..o+size]`), or None
        where the batch keeps the block's order."""
        reordered = self._reordered
        return tuple(
            None
            if (pick := reordered.get(axis)) is None
            else np.asarray(pick.places, dtype=np.int64)
            for axis in range(self._first_cropped, len(self.block_shape))
        )

    def _positions(self, axis: int) -> np.ndarray:
        pick = self._reordered.get(axis)
        if pick is None:
            return np.arange(self.block_shape[axis], dtype=np.int64)
        return np.asarray(pick.places, dtype=np.int64)


def take_picked(
    array: np.ndarray, rows: np.ndarray, take: PickedTake, out: np.ndarray | None = None
) -> np.ndarray:
    """`array`'s samples at block rows `rows`, reordered as `take` says: one take of rows,
    or with a reordered last axis one per run of its columns (`PickedTake.column_runs`),
    or one fancy index of rows by columns (what a gather writes into its batch).

    Args:
        array: the block array (numpy).
        rows: block rows of the samples (or their steps), any shape.
        take: the field's reordering.
        out: where to write them (shaped as the result), or None for a new array.
    """
    source, flat = take.view(array), take.rows(rows)
    columns = take.columns
    if columns is None:
        return np.take(source, flat, axis=0, out=out, mode="clip")
    runs = take.column_runs()
    if runs is None:
        taken = source[flat[..., None], columns]
        if out is None:
            return taken
        out[...] = taken
        return out
    if out is None:
        out = np.empty((*flat.shape, columns.size), dtype=array.dtype)
    for first, stop, at in runs:
        out[..., at : at + stop - first] = source[:, first:stop][flat]
    return out
