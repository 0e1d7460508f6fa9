"""A ring of reusable host staging buffers, each guarded by the event of its last copy.

Page-locked memory is slow to allocate (a `cudaHostAlloc` per batch costs more than the
copy it enables), so the node allocates a few buffers once, sized from the batch, and cycles
through them. A buffer may be overwritten only when the device has finished reading it:
each slot remembers the event recorded after its last copy, and `acquire` waits on it.
Nothing here needs CUDA: the allocator and the events are handed in, so the logic runs
(and is tested) on the CPU with events that are complete at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch


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


@dataclass
class _Slot:
    buffer: torch.Tensor | None = None
    last_copy: CompletionEvent | None = None


@dataclass
class RingStats:
    allocations: int = 0  # buffers allocated (or grown): one per slot in steady state
    waits: int = 0  # acquires that found the slot's last copy still running


class StagingRing:
    """`slots` byte buffers handed out in turn; `allocate(nbytes)` makes one."""

    def __init__(self, slots: int, allocate: Callable[[int], torch.Tensor]) -> None:
        if slots < 1:
            raise ValueError(f"a staging ring needs at least one slot, got {slots}")
        self._slots = [_Slot() for _ in range(slots)]
        self._allocate = allocate
        self._cursor = 0
        self.stats = RingStats()

    @property
    def slots(self) -> int:
        return len(self._slots)

    def acquire(self, nbytes: int) -> tuple[int, torch.Tensor]:
        """The next slot's index and its first `nbytes` bytes, once its last copy is done."""
        index = self._cursor
        self._cursor = (index + 1) % len(self._slots)
        slot = self._slots[index]
        if slot.last_copy is not None:
            if not slot.last_copy.query():
                self.stats.waits += 1
                slot.last_copy.synchronize()
            slot.last_copy = None
        if slot.buffer is None or slot.buffer.numel() < nbytes:
            slot.buffer = None  # free the small one before allocating the larger
            slot.buffer = self._allocate(nbytes)
            self.stats.allocations += 1
        return index, slot.buffer[:nbytes]

    def release_after(self, index: int, copy_done: CompletionEvent) -> None:
        """The slot may be reused once `copy_done` completes."""
        self._slots[index].last_copy = copy_done
