"""Canonical partitions: the C piles a training epoch's permuted units are dealt to before
the W ranks take them, so that a run keeps its order when resumed on another world size.

Position i of an epoch's unit order goes to partition i mod C, and partition p to rank
p mod W. C is a pure function of the split (`default_partition_count`), never of the
world size, and is recorded in the state's config: any W that divides C then deals the
same units to the same partitions, and when W does not divide C ranks hold C // W or
C // W + 1 partitions, about units / C apart. `partitions == world_size` is plain
round-robin, the deal the loader always had.
"""

from __future__ import annotations

import numpy as np

PARTITION_MULTIPLE = 48
"""The default partition count is a multiple of this: lcm(1, 2, 3, 4, 6, 8, 12, 16, 24), so
that the common GPU counts divide it."""


def default_partition_count(unit_count: int) -> int:
    """C, the canonical partition count a run uses unless told otherwise: the largest
    multiple of `PARTITION_MULTIPLE` (48) not above the split's unit count, so 1, 2, 3, 4,
    6, 8, 12, 16, 24 and 48 ranks each take equal numbers of partitions; a split of fewer
    than 48 units has one partition per unit (every world size then deals as round-robin).
    A pure function of the split, never of the world size, so that a run resumed on
    another number of ranks keeps it.

    Args:
        unit_count: the units of the split (>= 1).
    """
    if unit_count < 1:
        raise ValueError(f"the split has {unit_count} units: nothing to partition")
    if unit_count < PARTITION_MULTIPLE:
        return unit_count
    return unit_count // PARTITION_MULTIPLE * PARTITION_MULTIPLE


def check_partitions(partitions: int, unit_count: int, world_size: int) -> None:
    """Refuse a partition count below the world size or above the split's unit count.

    Args:
        partitions: C, the canonical partition count.
        unit_count: the units of the split.
        world_size: the number of ranks.
    """
    if not world_size <= partitions <= unit_count:
        raise ValueError(
            f"canonical_partitions={partitions} must be in [world_size={world_size}, "
            f"{unit_count}] (the split's units): every rank takes at least one partition "
            f"and every partition at least one unit; pass canonical_partitions between them"
        )


def position_ranks(size: int, partitions: int, world_size: int) -> np.ndarray:
    """The rank holding each position of an epoch's unit order: position i is partition
    i mod C, which rank (i mod C) mod W takes.

    Args:
        size: positions in the order (the split's units).
        partitions: C, the canonical partition count.
        world_size: W, the number of ranks.
    """
    return (np.arange(size, dtype=np.int64) % partitions) % world_size
