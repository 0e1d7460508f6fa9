"""What a batch holds, field by field, and the one fancy index that crops patches: the index
math both gathers share, the host's (`nodes.gather`) and the device's
(`nodes.tensor_gather`), so the two cannot disagree on a batch's shape or order (the rows
that put picked positions in the order asked for: `core.picked_takes`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from insitubatch_nodes.core.axis_pick import AxisPick
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
    picks: tuple[AxisPick, ...] = (),
) -> tuple[int, ...]:
    """(batch, [steps,] *sample_shape), the cropped axes at the patch's size, each
    reordered picked axis as long as the order asked for.

    Args:
        size: samples in the batch.
        block_shape: the block array's shape (rows first).
        columns: the field's offset columns, or None for no steps axis.
        crop: the patch's size along the cropped (last) axes, or () for none.
        picks: the variable's picks the batch reorders (`ReadPlan.reordered`).
    """
    sample = list(block_shape[1:])
    for pick in picks:
        sample[pick.axis - 1] = len(pick.places)
    sample_shape = tuple(sample)
    sample_shape = (*sample_shape[: len(sample_shape) - len(crop)], *crop)
    steps = () if columns is None else (columns.size,)
    return (size, *steps, *sample_shape)


def crop_index(
    rows: Any,
    origins: Any,
    size: tuple[int, ...],
    ndim: int,
    arange: Callable[[int], Any],
    lookups: Sequence[Any | None] = (),
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
        lookups: per cropped axis, the block positions of the batch's positions
            (`PickedTake.crop_lookups`, of the same kind as `rows`), or None where they
            are the same; empty for none.
    """
    n, steps = rows.shape
    k = len(size)
    middle = ndim - 1 - k
    index: list[Any] = [rows.reshape(n, steps, *([1] * k))]
    index += [slice(None)] * middle
    for axis, length in enumerate(size):
        shape = [n, 1] + [1] * k
        shape[2 + axis] = length
        along = origins[:, axis, None] + arange(length)[None, :]
        if axis < len(lookups) and (lookup := lookups[axis]) is not None:
            along = lookup[along]
        index.append(along.reshape(shape))
    return tuple(index), middle
