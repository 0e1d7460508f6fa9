"""Host batches to the device: one async copy of a staged batch, on a side stream.

`submit` queues the copy of a batch's bytes on the copier's own stream, so the copy
overlaps whatever the consumer's stream is running; `deliver` makes the consumer's
*current* stream wait on the copy's event (a GPU-side wait, the host never blocks) and
marks the device memory as used by that stream (`record_stream`), so the caching allocator
cannot hand it out again while the consumer still reads it.

A batch that a node wrote into its own page-locked ring (`Batch.staged`) is copied from
there as it is; any other batch is first packed into the copier's ring. On the CPU the
same code runs with plain memory and events that are complete at once; the node does not
use it there (a CPU batch needs no copy), but the tests do, to check the ring and the
ordering without a GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from insitubatch_nodes.device.batch_layout import BatchLayout
from insitubatch_nodes.device.staging_ring import (
    CompleteEvent,
    CompletionEvent,
    StagedBatch,
    StagingRing,
)


@dataclass(frozen=True)
class InFlightBatch:
    """A batch whose copy is queued; its tensors may be read once `copied` completes.

    Args:
        device_bytes: the batch's bytes on the device.
        layout: where each array lies in them.
        copied: the event recorded after the copy.
    """

    device_bytes: torch.Tensor
    layout: BatchLayout
    copied: CompletionEvent


class BatchCopier:
    """Copies host batches to `device` in one transfer each (see the module).

    Args:
        device: where batches go.
        slots: the ring's slots for batches that arrive unstaged (an int >= 1).
    """

    def __init__(self, device: torch.device, slots: int) -> None:
        self.device = device
        self._cuda = device.type == "cuda"
        self._stream = torch.cuda.Stream(device=device) if self._cuda else None
        self.ring = StagingRing(slots, self._allocate_host)
        self.packed = 0  # batches that had to be copied into the ring (not staged)

    def _allocate_host(self, nbytes: int) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=self._cuda)

    def submit(
        self, arrays: Mapping[str, np.ndarray], staged: StagedBatch | None = None
    ) -> InFlightBatch:
        """Queue the copy of `arrays`: straight from `staged` when they are its arrays as
        they were written there, else packed into the ring first.

        Args:
            arrays: the batch's host arrays.
            staged: the ring slot the batch says it was written into, or None.
        """
        if staged is None or not staged.holds(arrays):
            staged = self.ring.stage({name: (a.shape, a.dtype) for name, a in arrays.items()})
            for name, array in arrays.items():
                np.copyto(staged.arrays[name], array, casting="no")
            self.packed += 1
        if self._stream is None:
            device_bytes = staged.host.clone()
            copied: CompletionEvent = CompleteEvent()
        else:
            with torch.cuda.stream(self._stream):
                device_bytes = torch.empty(
                    staged.layout.nbytes, dtype=torch.uint8, device=self.device
                )
                device_bytes.copy_(staged.host, non_blocking=True)
                event = torch.cuda.Event()
                event.record(self._stream)
            copied = event
        staged.release_after(copied)
        return InFlightBatch(device_bytes, staged.layout, copied)

    def deliver(self, batch: InFlightBatch) -> dict[str, torch.Tensor]:
        """The batch's tensors, ordered after the copy on the caller's current stream.

        Args:
            batch: what `submit` returned.
        """
        if self._cuda:
            consumer = torch.cuda.current_stream(self.device)
            assert isinstance(batch.copied, torch.cuda.Event)
            consumer.wait_event(batch.copied)
            batch.device_bytes.record_stream(consumer)
        return batch.layout.views(batch.device_bytes)
