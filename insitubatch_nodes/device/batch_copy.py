"""Host batches to the device: staged in the ring, one async copy on a side stream.

`submit` packs a batch into a page-locked ring slot and queues its copy on the copier's
own stream, so the copy overlaps whatever the consumer's stream is running; `deliver`
makes the consumer's *current* stream wait on the copy's event (a GPU-side wait, the host
never blocks) and marks the device memory as used by that stream (`record_stream`), so
the caching allocator cannot hand it out again while the consumer still reads it.

On the CPU the same code runs with plain memory and events that are complete at once;
the node does not use it there (a CPU batch needs no copy), but the tests do, to check
the ring and the ordering without a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from insitubatch_nodes.device.batch_layout import BatchLayout
from insitubatch_nodes.device.staging_ring import CompleteEvent, CompletionEvent, StagingRing


@dataclass(frozen=True)
class InFlightBatch:
    """A batch whose copy is queued; its tensors may be read once `copied` completes."""

    device_bytes: torch.Tensor
    layout: BatchLayout
    copied: CompletionEvent


@dataclass(frozen=True)
class _Staged:
    index: int
    host: torch.Tensor
    layout: BatchLayout
    arrays: dict[str, np.ndarray]


class BatchCopier:
    """`stage` hands out a ring slot's memory for the producer to fill in place (the gather
    writes straight into pinned memory); `submit` copies a batch, packing it first unless
    it is the staged one."""

    def __init__(self, device: torch.device, slots: int) -> None:
        self.device = device
        self._cuda = device.type == "cuda"
        self._stream = torch.cuda.Stream(device=device) if self._cuda else None
        self.ring = StagingRing(slots, self._allocate_host)
        self._staged: _Staged | None = None
        self.packed = 0  # batches that had to be copied into the ring (not staged)

    def _allocate_host(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=self._cuda)

    def stage(self, spec: Mapping[str, tuple[tuple[int, ...], np.dtype]]) -> dict[str, np.ndarray]:
        """Arrays of these shapes and dtypes in the next ring slot, to be filled, then
        passed to `submit`. Staging again before submitting gives the slot up."""
        if self._staged is not None:
            self.ring.release_after(self._staged.index, CompleteEvent())
        layout = BatchLayout.of_spec(spec)
        index, host = self.ring.acquire(layout.nbytes)
        arrays = layout.host_views(host)
        self._staged = _Staged(index, host, layout, arrays)
        return dict(arrays)

    def _take_staged(self, arrays: Mapping[str, np.ndarray]) -> _Staged | None:
        staged, self._staged = self._staged, None
        if staged is None:
            return None
        if set(arrays) == set(staged.arrays) and all(
            arrays[name] is staged.arrays[name] for name in arrays
        ):
            return staged
        self.ring.release_after(staged.index, CompleteEvent())
        return None

    def submit(self, arrays: Mapping[str, np.ndarray]) -> InFlightBatch:
        staged = self._take_staged(arrays)
        if staged is not None:
            index, host, layout = staged.index, staged.host, staged.layout
        else:
            layout = BatchLayout.of(arrays)
            index, host = self.ring.acquire(layout.nbytes)
            layout.pack(arrays, host)
            self.packed += 1
        if self._stream is None:
            device_bytes = host.clone()
            copied: CompletionEvent = CompleteEvent()
        else:
            with torch.cuda.stream(self._stream):
                device_bytes = torch.empty(layout.nbytes, dtype=torch.uint8, device=self.device)
                device_bytes.copy_(host, non_blocking=True)
                event = torch.cuda.Event()
                event.record(self._stream)
            copied = event
        self.ring.release_after(index, copied)
        return InFlightBatch(device_bytes, layout, copied)

    def deliver(self, batch: InFlightBatch) -> dict[str, torch.Tensor]:
        """The batch's tensors, ordered after the copy on the caller's current stream."""
        if self._cuda:
            consumer = torch.cuda.current_stream(self.device)
            assert isinstance(batch.copied, torch.cuda.Event)
            consumer.wait_event(batch.copied)
            batch.device_bytes.record_stream(consumer)
        return batch.layout.views(batch.device_bytes)
