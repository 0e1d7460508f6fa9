"""A ring of reusable host staging buffers, each guarded by the event of its last copy and
by whatever still views it.

Page-locked memory is slow to allocate (a `cudaHostAlloc` per batch costs more than the
copy it enables), so a node allocates a few buffers once, sized from the batch, and cycles
through them. A node writes a batch straight into a slot (`stage`: one numpy view per
array, in a `BatchLayout`), so the batch crosses to the device in one copy of the slot's
bytes, never packed again.

A slot may be written again only when nothing reads it any more:

- the device: each slot remembers the event recorded after its last copy, and `stage`
  waits on it;
- the host: every array handed out is a view of the slot's one numpy array, so its
  reference count says whether a view (or a tensor made from one with `torch.from_numpy`)
  is still alive, as in `nodes.reused_buffers`. A slot still viewed (a batch the consumer
  keeps, a stage that holds batches) is left to its holders and the ring allocates a new
  one in its place: a ring that overwrote it would change a batch someone holds.

Nothing here needs CUDA: the allocator and the events are handed in, so the logic runs (and
is tested) on the CPU, with plain memory and events that are complete at once.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch

from insitubatch_nodes.device.batch_layout import BatchLayout


class CompletionEvent(Protocol):
    """What the ring needs of an event: `torch.cuda.Event` satisfies it."""

    def query(self) -> bool: ...

    def synchronize(self) -> None: ...


class CompleteEvent:
    """The event of a copy that was done before it was recorded (the CPU path)."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None


def page_locked(nbytes: int) -> torch.Tensor:
    """`nbytes` bytes of page-locked host memory where CUDA is available, else plain memory
    (nothing could copy from it faster, and the same code runs).

    Args:
        nbytes: the buffer's size in bytes.
    """
    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=torch.cuda.is_available())


@dataclass(eq=False)
class _Slot:
    buffer: torch.Tensor  # the bytes a device copy reads
    array: np.ndarray  # the same bytes: every view handed out is taken from this one
    last_copy: CompletionEvent | None = None


@dataclass(frozen=True, eq=False)
class StagedBatch:
    """A batch's arrays, to be written in place, in one ring slot.

    Args:
        arrays: one numpy view of `host` per array, laid out by `layout`.
        host: the slot's bytes that hold them: what the device copy reads.
        layout: where each array lies in `host`.
    """

    arrays: dict[str, np.ndarray]
    host: torch.Tensor
    layout: BatchLayout
    _slot: _Slot

    def holds(self, arrays: Mapping[str, Any]) -> bool:
        """Whether `arrays` are exactly this batch's arrays (a stage in between may have
        replaced or added one: then the slot's bytes are not the batch).

        Args:
            arrays: the batch's host arrays, as they reached the device copy.
        """
        return arrays.keys() == self.arrays.keys() and all(
            arrays[name] is array for name, array in self.arrays.items()
        )

    def release_after(self, copy_done: CompletionEvent) -> None:
        """The slot may be written again once `copy_done` completes.

        Args:
            copy_done: the event recorded after the copy that reads `host`.
        """
        self._slot.last_copy = copy_done


@dataclass
class RingStats:
    """What a ring did, for tests and benchmarks to check.

    Args:
        allocations: buffers allocated (or grown): one per slot in steady state.
        waits: stagings that found the slot's last copy still running.
        held: slots still viewed when their turn came, left to their holders.
    """

    allocations: int = 0
    waits: int = 0
    held: int = 0


class StagingRing:
    """`slots` byte buffers handed out in turn (see the module).

    Args:
        slots: how many (an int >= 1): one per batch between its staging and the end of
            its device copy, or stagings wait for copies.
        allocate: makes a byte buffer of `nbytes` (`page_locked`).
    """

    def __init__(self, slots: int, allocate: Callable[[int], torch.Tensor]) -> None:
        if slots < 1:
            raise ValueError(f"a staging ring needs at least one slot, got {slots}")
        self._slots: list[_Slot | None] = [None] * slots
        self._allocate = allocate
        self._cursor = 0
        self._unviewed = 0  # a slot array's reference count when nothing views it
        self.stats = RingStats()

    @property
    def slots(self) -> int:
        return len(self._slots)

    def stage(self, shapes: Mapping[str, tuple[tuple[int, ...], Any]]) -> StagedBatch:
        """Arrays of these `(shape, dtype)`s in the next slot, once the slot's last copy is
        done, for the caller to fill.

        Args:
            shapes: each array's shape and dtype, by name.
        """
        layout = BatchLayout.of_spec(shapes)
        slot = self._next_slot(layout.nbytes)
        arrays = layout.host_views(slot.array[: layout.nbytes])
        return StagedBatch(arrays, slot.buffer[: layout.nbytes], layout, slot)

    def _next_slot(self, nbytes: int) -> _Slot:
        index = self._cursor
        self._cursor = (index + 1) % len(self._slots)
        slot = self._slots[index]
        if slot is not None:
            if slot.last_copy is not None:
                if not slot.last_copy.query():
                    self.stats.waits += 1
                    slot.last_copy.synchronize()
                slot.last_copy = None
            if self._references(slot) > self._unviewed:
                self.stats.held += 1
                slot = None
            elif slot.buffer.numel() < nbytes:
                slot = None
        if slot is None:
            self._slots[index] = None  # free a smaller buffer before allocating the larger
            buffer = self._allocate(max(nbytes, 1))
            slot = _Slot(buffer, buffer.numpy())
            self._unviewed = self._references(slot)  # counted as when checked, unviewed
            self._slots[index] = slot
            self.stats.allocations += 1
        return slot

    @staticmethod
    def _references(slot: _Slot) -> int:
        """References to the slot's array: the slot's own, and one per live view."""
        return sys.getrefcount(slot.array)
