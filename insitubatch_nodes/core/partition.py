"""Which units a rank reads in an epoch: a (seed, epoch) permutation dealt out round-robin.

All ranks compute the same permutation from the same seed and epoch, then rank r takes
every W-th unit starting at r. Because each rank can compute every other rank's share,
each one knows the common per-rank sample count without talking to the others, which is
what keeps batch counts equal across ranks (see `samples_per_rank`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.geometry import UnitSamples
from insitubatch_nodes.core.seeding import rng_for


def chunk_permutation(split_units: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """`split_units` in the order of epoch `epoch`: a pure function of (seed, epoch)."""
    units = np.sort(np.asarray(split_units, dtype=np.int64))
    return units[rng_for(seed, "chunk-permutation", epoch).permutation(units.size)]


def _full_and_short(
    geometry: UnitSamples, split_units: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Units holding `unit_length` samples, and the others, each sorted.

    Without windows the only short unit is the array's ragged last one; with windows the
    units at the edges of a split's runs lose the anchors whose windows would leave it.
    """
    units = np.sort(np.asarray(split_units, dtype=np.int64))
    short = geometry.unit_sizes(units) < geometry.unit_length
    return units[~short], units[short]


def rank_sample_counts(
    geometry: UnitSamples, split_units: np.ndarray, world_size: int
) -> np.ndarray:
    """Samples each rank holds per epoch: the same every epoch.

    Full units are dealt round-robin; the short units (in unit order) always take the last
    dealing slots, so which rank holds each of them, and therefore every rank's count,
    never depends on the epoch.
    """
    full, short = _full_and_short(geometry, split_units)
    total = full.size + short.size
    if total < world_size:
        raise ValueError(
            f"the split has {total} chunk-aligned units, fewer than world_size="
            f"{world_size}: every rank needs at least one; use fewer ranks or a larger split"
        )
    sizes = np.concatenate(
        [np.full(full.size, geometry.unit_length, dtype=np.int64), geometry.unit_sizes(short)]
    )
    counts = np.zeros(world_size, dtype=np.int64)
    np.add.at(counts, np.arange(total) % world_size, sizes)
    return counts


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
        """Samples every rank yields per epoch, so that all ranks step the same number of times.

        Without `drop_last` each rank yields as many as the largest share; a rank with a
        smaller share pads by repeating draws from its last block. With `drop_last` each rank
        yields the largest multiple of `batch_size` that the smallest share can fill. Shares
        do not change between epochs, so neither does this.
        """
        return samples_per_rank(self.min_rank_samples, self.max_rank_samples, batch_size, drop_last)


def samples_per_rank(
    min_rank_samples: int, max_rank_samples: int, batch_size: int, drop_last: bool
) -> int:
    if drop_last:
        return (min_rank_samples // batch_size) * batch_size
    return max_rank_samples


def _scatter_short_units(mine: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Move the last `count` units (the short ones) to seeded places in the share, so the
    short units are not always read last; one insertion per short unit, not per sample."""
    placed = mine[:-count]
    for unit in mine[-count:].tolist():
        placed = np.insert(placed, int(rng.integers(placed.size + 1)), unit)
    return placed


def check_rank(rank: int, world_size: int) -> None:
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")


def assign_epoch(
    geometry: UnitSamples,
    split_units: np.ndarray,
    *,
    seed: int,
    epoch: int,
    rank: int,
    world_size: int,
) -> EpochAssignment:
    """Rank `rank`'s units for `epoch`; short units sit at seeded places in its share."""
    check_rank(rank, world_size)
    counts = rank_sample_counts(geometry, split_units, world_size)
    full, short = _full_and_short(geometry, split_units)
    order = np.concatenate([chunk_permutation(full, seed, epoch), short])
    mine = order[rank::world_size]
    mine_short = len(range(rank, order.size, world_size)) - len(range(rank, full.size, world_size))
    if mine_short:
        mine = _scatter_short_units(mine, mine_short, rng_for(seed, "ragged-slot", epoch))
    return EpochAssignment(
        seed=seed,
        epoch=epoch,
        rank=rank,
        world_size=world_size,
        units=mine,
        rank_samples=int(counts[rank]),
        min_rank_samples=int(counts.min()),
        max_rank_samples=int(counts.max()),
    )
