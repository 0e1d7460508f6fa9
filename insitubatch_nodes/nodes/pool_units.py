"""The units resident in the pool shuffle's pool, in pool order, with the samples each has
left and has given kept in int64 arrays.

A batch's draw (`core.pool_order.pool_take`) needs every resident unit's count, after it
every unit that gave its last sample leaves the pool, and the state the device node keeps
after every batch names every resident unit with what it gave. Kept per unit object, each
is a walk over the whole pool in Python on every batch, and at one step per chunk a pool
holds hundreds to thousands of units of one sample each (issue 33). Kept here, the counts
go to the draw as they are, are updated by one array subtraction, a state takes two array
copies (`resident`), and only the units a batch draws from (at most a batch's samples)
are visited in Python. The counts are the same integers in the same order as before, so
every draw is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

import numpy as np

U = TypeVar("U")


class PoolUnits(Generic[U]):
    """Resident units in pool (entry) order, the samples each has left and where each
    stands in the rank's unit order. Units are appended one at a time (buffered, and
    joined to the arrays at the next draw) and leave when a draw drains them."""

    def __init__(self) -> None:
        self._units: np.ndarray = np.empty(0, dtype=object)
        self._left = np.empty(0, dtype=np.int64)
        self._positions = np.empty(0, dtype=np.int64)
        self._given = np.empty(0, dtype=np.int64)
        self._new: list[tuple[U, int, int, int]] = []
        self._samples = 0

    def __len__(self) -> int:
        return int(self._units.size) + len(self._new)

    def __iter__(self) -> Iterator[U]:
        self._settle()
        return iter(self._units.tolist())

    @property
    def samples(self) -> int:
        """Samples the resident units have left, in all."""
        return self._samples

    def append(self, unit: U, position: int, left: int, given: int = 0) -> None:
        """Add a unit at the end of the pool.

        Args:
            unit: the unit.
            position: where it stands in the rank's unit order.
            left: samples it has left to give (>= 0).
            given: samples it gave already (a restored state's count; >= 0).
        """
        self._new.append((unit, position, left, given))
        self._samples += left

    def left(self) -> np.ndarray:
        """Samples each resident unit has left, in pool order (the draw's input; not to be
        written to)."""
        self._settle()
        return self._left

    def resident(self) -> tuple[np.ndarray, np.ndarray]:
        """Each resident unit's position in the rank's unit order and the samples it gave,
        in pool order: copies, two array copies whatever the pool's size (a walk over the
        units made one Python object per unit, per batch)."""
        self._settle()
        return self._positions.copy(), self._given.copy()

    def oldest_position(self) -> int | None:
        """The smallest position in the rank's unit order of a resident unit (None: the
        pool is empty)."""
        self._settle()
        return int(self._positions.min()) if self._positions.size else None

    def give(self, counts: np.ndarray) -> list[tuple[U, int, bool]]:
        """Take `counts[i]` samples from the i-th resident unit, drop the units left with
        none, and say which units gave: (unit, count, drained) in pool order, for the
        units with a count above 0 only.

        Args:
            counts: samples each resident unit gives, in pool order (what `pool_take`
                drew over `left()`; each at most that unit's count).
        """
        self._settle()
        counts = np.asarray(counts, dtype=np.int64)
        drawn = np.flatnonzero(counts)
        self._left -= counts
        self._given += counts
        self._samples -= int(counts.sum())
        gave = list(
            zip(
                self._units[drawn].tolist(),
                counts[drawn].tolist(),
                (self._left[drawn] == 0).tolist(),
                strict=True,
            )
        )
        keep = self._left > 0
        if not keep.all():
            self._units, self._left = self._units[keep], self._left[keep]
            self._positions, self._given = self._positions[keep], self._given[keep]
        return gave

    def _settle(self) -> None:
        """Join the units appended since the last draw to the arrays."""
        if not self._new:
            return
        units = np.empty(len(self._new), dtype=object)
        units[:] = [unit for unit, _, _, _ in self._new]
        self._units = np.concatenate([self._units, units])
        _, positions, left, given = zip(*self._new, strict=True)
        self._positions = np.concatenate([self._positions, np.array(positions, dtype=np.int64)])
        self._left = np.concatenate([self._left, np.array(left, dtype=np.int64)])
        self._given = np.concatenate([self._given, np.array(given, dtype=np.int64)])
        self._new = []
