"""AxisPick: the positions of one inner axis (levels, an area's rows or columns) that a
variable's blocks keep, apart from the sample axis' geometry (`core.geometry`), which
carries one per picked axis in `VariableLayout.picks`.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AxisPick:
    """Positions kept along one inner axis of an array (say, a few pressure levels of 37):
    blocks hold only those, in increasing order. A chunk holding some of them is decoded
    whole and only those are kept (`read_plan.chunk_regions`); chunks holding none are not
    read.

    A batch holds them in the order they were asked for (`order`), as `ds.sel(level=[500,
    850])` gives them whatever order the store keeps levels in: the read stays sorted, so
    it needs only the chunks that hold a kept position however the list was written, and
    the gather puts them in the batch's order with the same one take per field
    (`core.picked_takes`).

    Args:
        axis: the array axis (1 or more: the sample axis is never picked).
        indices: the kept positions along it, strictly increasing.
        labels: each kept position's coordinate value as text ("500" for a pressure
            level), in the order of `indices`, which names its channel (`temperature_500`);
            empty for none.
        order: the batch's positions along the axis, each a place in `indices`
            (`order[i] == k`: the batch's i-th is position `indices[k]`): the order asked
            for, where a place may come twice (`ds.sel` repeats a level asked twice); every
            place at least once. Empty for the order of `indices` itself.
    """

    axis: int
    indices: tuple[int, ...]
    labels: tuple[str, ...] = ()
    order: tuple[int, ...] = ()

    @property
    def places(self) -> tuple[int, ...]:
        """The batch's positions along the axis as places in `indices` (`order`, or each
        place once in turn)."""
        return self.order or tuple(range(len(self.indices)))

    @property
    def reorders(self) -> bool:
        """Whether a batch holds the kept positions otherwise than a block does (then the
        gather reorders them)."""
        return self.places != tuple(range(len(self.indices)))

    @property
    def batch_indices(self) -> tuple[int, ...]:
        """The positions along the axis a batch holds, in its order."""
        return tuple(self.indices[k] for k in self.places)

    @property
    def batch_labels(self) -> tuple[str, ...]:
        """The labels of the batch's positions, in its order (its channels' names); empty
        without labels."""
        return tuple(self.labels[k] for k in self.places) if self.labels else ()

    def within(self, start: int, stop: int) -> tuple[slice | np.ndarray, slice]:
        """The kept positions in `[start, stop)`, relative to `start` (a slice when they
        are evenly spaced, so that keeping them copies no index array), and where they
        land among all kept positions.

        Args:
            start: the first position of a chunk along the axis.
            stop: the position after its last.
        """
        first = bisect.bisect_left(self.indices, start)
        last = bisect.bisect_left(self.indices, stop)
        kept = [i - start for i in self.indices[first:last]]
        steps = {b - a for a, b in itertools.pairwise(kept)}
        if len(steps) <= 1:
            step = steps.pop() if steps else 1
            source: slice | np.ndarray = slice(kept[0], kept[-1] + 1, step) if kept else slice(0, 0)
        else:
            source = np.asarray(kept, dtype=np.intp)
        return source, slice(first, last)
