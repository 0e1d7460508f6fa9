"""The short units' deal of version 1, kept so that a state saved before version 2 resumes
to the batches it would have given.

Version 1 dealt the short units (a split's edges under windows, leads or a stride, and the
array's ragged last unit) as the positions after the full units: the k-th short unit, in
unit order, to the rank of position `full units + k` (`core.canonical_partitions`). With
two or more short units a rank could then hold one unit more than another and a short one
besides, padding past a unit, which version 2 (`core.short_unit_deal`) mends. A state
that records no deal version was dealt by this one, and a loader that takes it up keeps
dealing by it for the rest of the run; nothing else deals by it.
"""

from __future__ import annotations

import numpy as np

from insitubatch_nodes.core.canonical_partitions import position_ranks


def version_1_short_ranks(
    full_units: int, short_units: int, partitions: int, world_size: int
) -> np.ndarray:
    """The rank holding each short unit, in unit order, under version 1: the ranks of the
    positions that follow the full units.

    Args:
        full_units: how many full units the split has (the positions before the short ones).
        short_units: how many short units it has.
        partitions: C, the canonical partition count.
        world_size: W, the number of ranks.
    """
    return position_ranks(full_units + short_units, partitions, world_size)[full_units:]
