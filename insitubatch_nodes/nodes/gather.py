"""GatherNode: turns a batch draw into contiguous arrays, one vectorised take per block."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.items import SAMPLE_INDEX_KEY, BatchDraw

Allocate = Callable[[dict[str, tuple[tuple[int, ...], np.dtype]]], dict[str, np.ndarray]]


class GatherNode(BaseNode[dict[str, np.ndarray]]):
    """Yields `{variable: (batch, *sample_shape) array, "sample_index": int64 (batch,)}`.

    Work is one `np.take` per (variable, resident block in the batch): it scales with the
    blocks a batch touches, never with its samples. `mode="clip"`: the rows come from a
    permutation of the block, always in range, and numpy's default `mode="raise"` copies
    through a temporary buffer (about 3x slower here). Blocks decoded on a device hold
    tensors there: the batch is gathered there too (`gather_tensors`), only `sample_index`
    stays a host array.
    """

    SOURCE_KEY = "source"

    def __init__(self, source: BaseNode[BatchDraw], allocate: Allocate | None = None) -> None:
        """`allocate({name: (shape, dtype)})` gives the arrays to gather into (by default
        new ones): `PinToDeviceNode`'s staging ring, so the gather writes pinned memory."""
        super().__init__()
        self.source = source
        self.allocate = allocate

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(None if initial_state is None else initial_state[self.SOURCE_KEY])

    def next(self) -> dict[str, Any]:
        draw = next(self.source)
        first = next(iter(draw.parts[0][0].arrays.values()), None)
        if isinstance(first, torch.Tensor):
            return gather_tensors(draw)
        return gather(draw, self.allocate)

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self.source.state_dict()}


def gather(draw: BatchDraw, allocate: Allocate | None = None) -> dict[str, np.ndarray]:
    first_block = draw.parts[0][0]
    size = draw.size
    spec = {
        name: ((size, *sample.shape[1:]), sample.dtype)
        for name, sample in first_block.arrays.items()
    }
    if allocate is None:
        out = {name: np.empty(shape, dtype=dtype) for name, (shape, dtype) in spec.items()}
    else:
        out = allocate(spec)
    out[SAMPLE_INDEX_KEY] = np.empty(size, dtype=np.int64)
    start = 0
    for block, rows in draw.parts:
        stop = start + rows.size
        for name, array in block.arrays.items():
            np.take(array, rows, axis=0, out=out[name][start:stop], mode="clip")
        np.take(block.plan.sample_index, rows, out=out[SAMPLE_INDEX_KEY][start:stop], mode="clip")
        start = stop
    return out


def gather_tensors(draw: BatchDraw) -> dict[str, Any]:
    """`gather` for blocks of tensors: one `index_select` per (variable, block) on their
    device, queued on the caller's current stream."""
    first_block = draw.parts[0][0]
    out: dict[str, Any] = {}
    for name, sample in first_block.arrays.items():
        out[name] = sample.new_empty((draw.size, *sample.shape[1:]))
    sample_index = np.empty(draw.size, dtype=np.int64)
    start = 0
    for block, rows in draw.parts:
        stop = start + rows.size
        on_device: dict[torch.device, torch.Tensor] = {}
        for name, tensor in block.arrays.items():
            if tensor.device not in on_device:
                index = torch.from_numpy(rows)
                if tensor.is_cuda:  # pinned: a pageable copy would wait for the stream
                    index = index.pin_memory()
                on_device[tensor.device] = index.to(tensor.device, non_blocking=True)
            torch.index_select(tensor, 0, on_device[tensor.device], out=out[name][start:stop])
            if tensor.is_cuda:  # the block was allocated on the decode stream: keep it
                tensor.record_stream(torch.cuda.current_stream(tensor.device))  # until read
        np.take(block.plan.sample_index, rows, out=sample_index[start:stop], mode="clip")
        start = stop
    out[SAMPLE_INDEX_KEY] = sample_index
    return out
