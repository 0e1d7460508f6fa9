"""Which units a rank reads in an epoch: a (seed, epoch) permutation dealt out round-robin.

All ranks compute the same permutation from the same seed and epoch, then rank r takes
every W-th unit starting at r. Because each rank can compute every other rank's share,
each one knows the common per-rank sample count without talking to the others, which is
what keeps batch counts equal across ranks (see `samples_per_rank`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.geometry import SampleGeometry
from insitubatch_nodes.core.seeding import rng_for


def chunk_permutation(split_units: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """The split's units in the order of epoch `epoch`: a pure function of (seed, epoch)."""
    units = np.sort(np.asarray(split_units, dtype=np.int64))
    return units[rng_for(seed, "chunk-permutation", epoch).permutation(units.size)]


@dataclass(frozen=True, eq=False)
class EpochAssignment:
    """One rank's units for one epoch, with the sample counts every rank can agree on."""

    seed: int
    epoch: int
    rank: int
    world_size: int
    units: np.ndarray
    rank_samples: int
    min_rank_samples: int
    max_rank_samples: int

    def samples_per_rank(self, batch_size: int, drop_last: bool) -> int:
        """Samples every rank yields this epoch, so that all ranks step the same number of times.

        Without `drop_last` each rank yields as many as the largest share; a rank with a
        smaller share pads by repeating draws from its last block. With `drop_last` each rank
        yields the largest multiple of `batch_size` that the smallest share can fill.
        """
        if drop_last:
            return (self.min_rank_samples // batch_size) * batch_size
        return self.max_rank_samples


def check_rank(rank: int, world_size: int) -> None:
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")


def assign_epoch(
    geometry: SampleGeometry,
    split_units: np.ndarray,
    *,
    seed: int,
    epoch: int,
    rank: int,
    world_size: int,
) -> EpochAssignment:
    check_rank(rank, world_size)
    order = chunk_permutation(split_units, seed, epoch)
    if order.size < world_size:
        raise ValueError(
            f"the split has {order.size} chunk-aligned units, fewer than world_size="
            f"{world_size}: every rank needs at least one; use fewer ranks or a larger split"
        )
    sizes = geometry.unit_sizes(order)
    per_rank = np.array([int(sizes[r::world_size].sum()) for r in range(world_size)])
    return EpochAssignment(
        seed=seed,
        epoch=epoch,
        rank=rank,
        world_size=world_size,
        units=order[rank::world_size],
        rank_samples=int(per_rank[rank]),
        min_rank_samples=int(per_rank.min()),
        max_rank_samples=int(per_rank.max()),
    )
