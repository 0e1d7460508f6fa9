"""ReusedBuffers: arrays (the gather's batches) that reuse the memory of arrays nobody
holds any more.

A batch is written once by the gather, handed out, then dropped. A fresh `np.empty` of a
megabyte or more comes straight from the kernel, and the first write of every page
faults: a cost as large as the gather's copy. So the gather keeps the memory (a slab) of
batches whose arrays are all gone, and hands it out again. (Blocks have slots of their
own, `io.reads.block_slots`, freed chunk by chunk.)

A slab is free when nothing but the pool refers to it: every numpy view keeps the array
that owns its memory alive, and so does a tensor made with `torch.from_numpy`, so a batch
the consumer keeps, or anything else viewing it, keeps the slab's reference count up.
Idle slabs are bounded in bytes.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

SLACK = 8  # an idle slab serves a request at most 1/SLACK larger: the budget counts the
# requested sizes, so looser fits would let real read-ahead memory outgrow it


class ReusedBuffers:
    """Uninitialised arrays in the memory of dropped ones (see the module).

    Args:
        max_idle_bytes: memory of dropped arrays kept for reuse, at most.
    """

    def __init__(self, max_idle_bytes: int) -> None:
        self.max_idle_bytes = max_idle_bytes
        self._slabs: list[np.ndarray] = []
        self._free_count = 0  # a slab's reference count when only the pool holds it
        self.reused = 0  # buffers handed out from an idle slab

    def empty(self, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
        """An uninitialised array, in an idle slab when one fits (at most 1/SLACK larger)."""
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        idle = self._idle()
        fitting = [s for s in idle if nbytes <= s.nbytes <= nbytes + nbytes // SLACK]
        if fitting:
            slab = min(fitting, key=lambda s: s.nbytes)
            self.reused += 1
        else:
            self._slabs.append(np.empty(max(nbytes, 1), dtype=np.uint8))
            if not self._free_count:  # measured as `_idle` counts, while surely unused
                self._free_count = self._counts(self._slabs)[-1]
            self._trim(idle)
            slab = self._slabs[-1]
        return slab[:nbytes].view(dtype).reshape(shape)

    def _idle(self) -> list[np.ndarray]:
        counts = self._counts(self._slabs)
        return [
            s for s, count in zip(self._slabs, counts, strict=True) if count == self._free_count
        ]

    @staticmethod
    def _counts(slabs: list[np.ndarray]) -> list[int]:
        """Each slab's reference count, all taken the same way (the list and the loop's
        own reference included)."""
        return [sys.getrefcount(slab) for slab in slabs]

    def _trim(self, idle: list[np.ndarray]) -> None:
        """Let the largest idle slabs go until the idle ones fit `max_idle_bytes`."""
        total = sum(slab.nbytes for slab in idle)
        for slab in sorted(idle, key=lambda s: s.nbytes, reverse=True):
            if total <= self.max_idle_bytes:
                return
            total -= slab.nbytes
            self._slabs = [s for s in self._slabs if s is not slab]
