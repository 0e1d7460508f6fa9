"""What a batch holds, field by field, the one fancy index that crops patches, and the rows
that put picked levels in the order asked for: the index math both gathers share, the
host's (`nodes.gather`) and the device's (`nodes.tensor_gather`), so the two cannot
disagree on a batch's shape or order."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from insitubatch_nodes.core.geometry import AxisPick
from insitubatch_nodes.core.read_plan import ReadPlan

SAMPLE_INDEX_KEY = "sample_index"
PATCH_ORIGIN_KEY = "patch_origin"  # with patches: (batch, axes) crop origin of each sample
HOST_KEYS = frozenset({SAMPLE_INDEX_KEY, PATCH_ORIGIN_KEY})  # numpy on the host in any batch


def batch_fields(plan: ReadPlan) -> list[tuple[str, str, np.ndarray | None]]:
    """`(batch key, variable, offset columns)`; columns `None` means no steps axis.

    Args:
        plan: the read plan of any block of the batch (all share the spec).
    """
    if plan.spec is None:
        return [(name, name, None) for name in plan.reads]
    fields = []
    for key, _, variable, offsets in plan.spec.fields():
        have = plan.offsets[variable]
        fields.append((key, variable, np.array([have.index(o) for o in offsets])))
    return fields


def batch_shape(
    size: int,
    block_shape: tuple[int, ...],
    columns: np.ndarray | None,
    crop: tuple[int, ...],
    pick: AxisPick | None = None,
) -> tuple[int, ...]:
    """(batch, [steps,] *sample_shape), the cropped axes at the patch's size, a reordered
    picked axis as long as the order asked for.

    Args:
        size: samples in the batch.
        block_shape: the block array's shape (rows first).
        columns: the field's offset columns, or None for no steps axis.
        crop: the patch's size along the cropped (last) axes, or () for none.
        pick: the variable's pick when the batch reorders it (`ReadPlan.reordered`), or
            None.
    """
    sample_shape = tuple(block_shape[1:])
    if pick is not None:
        at = pick.axis - 1
        sample_shape = (*sample_shape[:at], len(pick.places), *sample_shape[at + 1 :])
    sample_shape = (*sample_shape[: len(sample_shape) - len(crop)], *crop)
    steps = () if columns is None else (columns.size,)
    return (size, *steps, *sample_shape)


def crop_index(
    rows: Any, origins: Any, size: tuple[int, ...], ndim: int, arange: Callable[[int], Any]
) -> tuple[tuple[Any, ...], int]:
    """The one fancy index that takes `array[rows[i, j], ..., o_i : o_i + size]` for all
    i, j from an `ndim`-dimensional block, built from numpy arrays or from tensors (with
    `arange` of the same kind, on the same device); and how many axes lie between the
    sample axis and the cropped ones (they come out after the cropped axes).

    Args:
        rows: (n, steps) block rows of the samples' steps.
        origins: (n, len(size)) each sample's crop origin.
        size: the crop's length along each cropped (last) axis.
        ndim: the block's dimensions.
        arange: `np.arange`, or `torch.arange` on the block's device.
    """
    n, steps = rows.shape
    k = len(size)
    middle = ndim - 1 - k
    index: list[Any] = [rows.reshape(n, steps, *([1] * k))]
    index += [slice(None)] * middle
    for axis, length in enumerate(size):
        shape = [n, 1] + [1] * k
        shape[2 + axis] = length
        index.append((origins[:, axis, None] + arange(length)[None, :]).reshape(shape))
    return tuple(index), middle


def picked_view(array: Any, pick: AxisPick) -> Any:
    """A block array (numpy or a tensor) as rows of what lies after its picked axis:
    `(-1, *array.shape[pick.axis + 1:])`, the array a reordering take reads
    (`picked_rows`). A view of the block's memory, which is contiguous.

    Args:
        array: the block array (rows first).
        pick: its variable's pick.
    """
    return array.reshape(-1, *array.shape[pick.axis + 1 :])


def picked_rows(rows: np.ndarray, block_shape: tuple[int, ...], pick: AxisPick) -> np.ndarray:
    """The rows of `picked_view` that hold the samples at block rows `rows` with the picked
    axis in the batch's order: `(*rows.shape, *block_shape[1:pick.axis], len(places))`.

    A take of them is the batch, its levels in the order asked for, in one take per field
    as without a pick: reordering levels costs index arithmetic over (samples x levels),
    never a second copy of the batch nor a step per sample. The read stays sorted (each
    kept level once, only the chunks holding one); the order is applied here.

    Args:
        rows: block rows of the samples (or of their steps), any shape.
        block_shape: the block array's shape (rows first).
        pick: the variable's pick (`ReadPlan.reordered`).
    """
    between = tuple(block_shape[1 : pick.axis])
    kept = block_shape[pick.axis]
    places = np.asarray(pick.places, dtype=np.int64)
    per_row = math.prod(between) * kept  # rows of the view per block row
    inner = np.arange(0, per_row, kept, dtype=np.int64)[:, None] + places[None, :]
    flat = np.asarray(rows, dtype=np.int64)[..., None] * per_row + inner.reshape(-1)
    return flat.reshape(*np.shape(rows), *between, places.size)
