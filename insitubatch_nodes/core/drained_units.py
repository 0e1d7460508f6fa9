"""The units of an epoch a pool shuffle drained before its state was saved: what a resume
leaves out of its reads.

A pool shuffle's state already says, in O(P) ints, which of the rank's units it still
needs: the resident units (their positions in the rank's unit order), every unit from
`next_unit` on (not entered yet), and, when the rank pads, the epoch's last unit (padding
repeats its draw). Every other position below `next_unit` gave its last sample before the
cut. Those positions are scattered among the ones still needed (a pool holds units that
entered long ago beside new ones), so a resume that reads whole blocks from the oldest
unit still needed re-reads about as many drained units as resident ones; planning blocks
without them reads, decodes and holds only what the rest of the epoch draws from.

A unit drained stays drained until the epoch ends, so the rule holds for the whole epoch
the state was saved in, whatever is read or saved after it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.partition import EpochAssignment


@dataclass(frozen=True)
class DrainedUnits:
    """The drained units of one rank's epoch, as a restored pool shuffle knows them.

    Args:
        next_unit: the position of the next unit to enter the pool; every position from
            it on is still needed.
        resident: the positions (below `next_unit`) of the units in the pool at the cut.
        samples_target: the samples the rank's epoch yields; above the share's own samples
            the rank pads from its last unit, which is then still needed.
    """

    next_unit: int
    resident: frozenset[int]
    samples_target: int

    @classmethod
    def of(cls, next_unit: int, resident: Collection[int], samples_target: int) -> DrainedUnits:
        """The drained units from a pool's cursors (plain ints, as its state holds them).

        Args:
            next_unit: the position of the next unit to enter.
            resident: the positions of the resident units.
            samples_target: the samples the rank's epoch yields.
        """
        return cls(int(next_unit), frozenset(int(p) for p in resident), int(samples_target))

    def drained(self, assignment: EpochAssignment, positions: np.ndarray) -> np.ndarray:
        """Which of `positions` (in the rank's unit order of `assignment`) were drained: a
        boolean array of their shape.

        Args:
            assignment: the rank's epoch the positions are in.
            positions: positions in `assignment.units`.
        """
        positions = np.asarray(positions, dtype=np.int64)
        resident = np.fromiter(self.resident, dtype=np.int64, count=len(self.resident))
        drained = (positions < self.next_unit) & ~np.isin(positions, resident)
        if self.samples_target > assignment.rank_samples:  # it pads from its last unit
            drained &= positions != assignment.units.size - 1
        return drained
