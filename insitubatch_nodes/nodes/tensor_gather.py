"""The gather for blocks that live on a device (GPU decode): each field taken there, queued
on the caller's stream, from index arrays uploaded once per batch."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from insitubatch_nodes.core.batch_fields import (
    PATCH_ORIGIN_KEY,
    SAMPLE_INDEX_KEY,
    batch_fields,
    batch_shape,
    crop_index,
    picked_rows,
    picked_view,
)
from insitubatch_nodes.nodes.items import BatchDraw, FetchedBlock


def _field_rows(
    block: FetchedBlock, variable: str, rows: np.ndarray, columns: np.ndarray | None
) -> np.ndarray:
    """The rows of the block's array holding the drawn samples' steps: (n, steps), one
    column without a spec; with levels the batch reorders (`ReadPlan.reordered`), the
    rows of its `picked_view` holding them in the batch's order, (n, steps x levels)."""
    table = block.plan.rows[variable]
    picked = table[rows, :1] if columns is None else table[rows[:, None], columns[None, :]]
    found = block.rows(variable, picked)
    pick = block.plan.reordered.get(variable)
    if pick is None:
        return found
    reordered = picked_rows(found, tuple(block.arrays[variable].shape), pick)
    return reordered.reshape(len(rows), -1)


def crop_tensor_rows(
    tensor: torch.Tensor, rows: torch.Tensor, origins: torch.Tensor, size: tuple[int, ...]
) -> torch.Tensor:
    """`nodes.gather.crop_rows` for a tensor, with `rows` and `origins` already on its device (torch
    orders the axes of such an index as numpy does).

    Args:
        tensor: the block buffer.
        rows: (n, steps) block rows of the samples' steps.
        origins: (n, len(size)) each sample's crop origin.
        size: the crop's length along each cropped (last) axis.
    """
    index, middle = crop_index(
        rows, origins, size, tensor.ndim, functools.partial(torch.arange, device=tensor.device)
    )
    taken = tensor[index]
    if middle:
        k = len(size)
        taken = torch.movedim(taken, list(range(2 + k, 2 + k + middle)), list(range(2, 2 + middle)))
    return taken


def _upload(
    indices: list[dict[str, np.ndarray]], device: torch.device
) -> list[dict[str, torch.Tensor]]:
    """Index arrays of a batch's blocks on `device`, in one copy for the whole batch (from
    pinned memory on CUDA, so the copy is queued on the stream instead of waiting for the
    work queued before it): a pool batch draws from tens of blocks, and a copy per block
    was most of the gather's host time."""
    host = torch.from_numpy(
        np.concatenate([np.ravel(i).astype(np.int64) for part in indices for i in part.values()])
    )
    if device.type == "cuda":
        host = host.pin_memory()
    flat = host.to(device, non_blocking=True)
    out = []
    start = 0
    for part in indices:
        views = {}
        for key, index in part.items():
            views[key] = flat[start : start + index.size].view(index.shape)
            start += index.size
        out.append(views)
    return out


def gather_tensors(draw: BatchDraw) -> dict[str, Any]:
    """`gather` for blocks of tensors, on their device (`FetchedBlock.device`), queued on
    the caller's current stream: one `index_select` per (field, block) through one upload
    of the batch's row indices, or with patches one fancy index per (field, block); levels
    the batch reorders come out of the same one (`core.batch_fields.picked_rows`). A
    draw that says its order (`BatchDraw.order`) is gathered so, then put in that order
    with one `index_select` per field (a copy on the device, rather than a take per
    sample). Only `sample_index` (and `patch_origin`) stay host arrays, in batch order.

    Args:
        draw: the batch's rows, by block.
    """
    first_block = draw.parts[0][0]
    plan = first_block.plan
    fields = batch_fields(plan)
    crop = () if plan.patches is None else plan.patches.size
    size = draw.size
    out: dict[str, Any] = {}
    for key, variable, columns in fields:
        sample = first_block.arrays[variable]
        pick = plan.reordered.get(variable)
        out[key] = sample.new_empty(batch_shape(size, tuple(sample.shape), columns, crop, pick))
    grouped = (
        out
        if draw.order is None
        else {key: value.new_empty(value.shape) for key, value in out.items()}
    )
    sample_index = np.empty(size, dtype=np.int64)
    origins = np.empty((size, len(crop)), dtype=np.int64) if crop else None
    wanted = []
    for block, rows in draw.parts:
        wanted.append(
            {key: _field_rows(block, variable, rows, columns) for key, variable, columns in fields}
        )
        if crop:
            assert block.plan.origins is not None
            wanted[-1][PATCH_ORIGIN_KEY] = block.plan.origins[rows]
    assert first_block.device is not None  # every block of a batch lives on one device
    if draw.order is not None:
        wanted.append({"order": draw.order})
    uploads = _upload(wanted, first_block.device)
    start = 0
    for (block, rows), uploaded in zip(draw.parts, uploads[: len(draw.parts)], strict=True):
        assert block.device is not None
        stop = start + rows.size
        for key, variable, _ in fields:
            tensor = block.arrays[variable]
            if (pick := plan.reordered.get(variable)) is not None:
                tensor = picked_view(tensor, pick)  # read at the rows `_field_rows` gave
            target = grouped[key][start:stop]
            if crop:
                taken = crop_tensor_rows(tensor, uploaded[key], uploaded[PATCH_ORIGIN_KEY], crop)
                target.copy_(taken.reshape(target.shape))
            else:
                flat = target.view(-1, *tensor.shape[1:])
                torch.index_select(tensor, 0, uploaded[key].view(-1), out=flat)
            if block.device.type == "cuda":  # allocated on the decode stream: keep it
                block.arrays[variable].record_stream(  # until read
                    torch.cuda.current_stream(block.device)
                )
        if origins is not None:
            assert block.plan.origins is not None
            origins[start:stop] = block.plan.origins[rows]
        np.take(block.plan.sample_index, rows, out=sample_index[start:stop], mode="clip")
        start = stop
    if draw.order is not None:
        order = uploads[-1]["order"]
        for key in out:
            torch.index_select(grouped[key], 0, order, out=out[key])
        sample_index = sample_index[draw.order]
        origins = None if origins is None else origins[draw.order]
    out[SAMPLE_INDEX_KEY] = sample_index
    if origins is not None:
        out[PATCH_ORIGIN_KEY] = origins
    return out
