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
)
from insitubatch_nodes.core.picked_takes import PickedTake
from insitubatch_nodes.nodes.items import BatchDraw, FetchedBlock


def _field_rows(
    block: FetchedBlock, variable: str, rows: np.ndarray, columns: np.ndarray | None
) -> np.ndarray:
    """The rows of the block's array holding the drawn samples' steps: (n, steps), one
    column without a spec; with positions the batch reorders (`ReadPlan.reordered`), the
    rows of the take's view holding them in the batch's order (`core.picked_takes`),
    (n, steps x folded positions)."""
    table = block.plan.rows[variable]
    picked = table[rows, :1] if columns is None else table[rows[:, None], columns[None, :]]
    found = block.rows(variable, picked)
    picks = block.plan.reordered.get(variable)
    if not picks:
        return found
    take = PickedTake(tuple(block.arrays[variable].shape), picks, _crop(block))
    return take.rows(found).reshape(len(rows), -1)


def _crop(block: FetchedBlock) -> tuple[int, ...]:
    patches = block.plan.patches
    return () if patches is None else patches.size


def crop_tensor_rows(
    tensor: torch.Tensor,
    rows: torch.Tensor,
    origins: torch.Tensor,
    size: tuple[int, ...],
    lookups: tuple[torch.Tensor | None, ...] = (),
) -> torch.Tensor:
    """`nodes.gather.crop_rows` for a tensor, with `rows` and `origins` already on its device (torch
    orders the axes of such an index as numpy does).

    Args:
        tensor: the block buffer.
        rows: (n, steps) block rows of the samples' steps.
        origins: (n, len(size)) each sample's crop origin.
        size: the crop's length along each cropped (last) axis.
        lookups: per cropped axis, the block positions of the batch's positions (on the
            tensor's device), or None (`core.picked_takes.PickedTake.crop_lookups`).
    """
    arange = functools.partial(torch.arange, device=tensor.device)
    index, middle = crop_index(rows, origins, size, tensor.ndim, arange, lookups)
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


def _positions(takes: dict[str, PickedTake]) -> dict[str, np.ndarray]:
    """The block positions of reordered axes a take indexes beside its rows (a reordered
    last axis's `columns`, cropped axes' lookups), by `key/columns` and `key/cropI`: sent
    to the device with the batch's row indices, in the same one copy."""
    positions = {}
    for key, take in takes.items():
        if (columns := take.columns) is not None:
            positions[f"{key}/columns"] = columns
        for i, lookup in enumerate(take.crop_lookups()):
            if lookup is not None:
                positions[f"{key}/crop{i}"] = lookup
    return positions


def gather_tensors(draw: BatchDraw) -> dict[str, Any]:
    """`gather` for blocks of tensors, on their device (`FetchedBlock.device`), queued on
    the caller's current stream: one `index_select` per (field, block) through one upload
    of the batch's row indices, or with patches one fancy index per (field, block); levels
    the batch reorders come out of the same one, an area's columns across the seam out of
    one `index_select` per run of them (`core.picked_takes`). A
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
        picks = plan.reordered.get(variable, ())
        out[key] = sample.new_empty(batch_shape(size, tuple(sample.shape), columns, crop, picks))
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
    takes = {
        key: PickedTake(tuple(first_block.arrays[variable].shape), picks, crop)
        for key, variable, _ in fields
        if (picks := plan.reordered.get(variable))
    }
    positions = _positions(takes)
    if draw.order is not None:
        wanted.append({"order": draw.order})
    wanted.append(positions)
    uploads = _upload(wanted, first_block.device)
    on_device = uploads[-1]
    start = 0
    for (block, rows), uploaded in zip(draw.parts, uploads[: len(draw.parts)], strict=True):
        assert block.device is not None
        stop = start + rows.size
        for key, variable, _ in fields:
            tensor = block.arrays[variable]
            take = takes.get(key)
            if take is not None:
                tensor = take.view(tensor)  # read at the rows `_field_rows` gave
            target = grouped[key][start:stop]
            if crop:
                lookups = tuple(on_device.get(f"{key}/crop{i}") for i in range(len(crop)))
                taken = crop_tensor_rows(
                    tensor, uploaded[key], uploaded[PATCH_ORIGIN_KEY], crop, lookups
                )
                target.copy_(taken.reshape(target.shape))
            elif take is not None and (runs := take.column_runs()) is not None:
                assert take.columns is not None  # runs are of the columns
                flat = target.view(-1, take.columns.size)
                for first, end, at in runs:  # an area's columns: a take per run
                    taken = torch.index_select(tensor[:, first:end], 0, uploaded[key].view(-1))
                    flat[:, at : at + end - first].copy_(taken)
            elif (columns := on_device.get(f"{key}/columns")) is not None:
                flat = target.view(-1, columns.numel())
                flat.copy_(tensor[uploaded[key].view(-1, 1), columns])
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
        order = uploads[-2]["order"]
        for key in out:
            torch.index_select(grouped[key], 0, order, out=out[key])
        sample_index = sample_index[draw.order]
        origins = None if origins is None else origins[draw.order]
    out[SAMPLE_INDEX_KEY] = sample_index
    if origins is not None:
        out[PATCH_ORIGIN_KEY] = origins
    return out
