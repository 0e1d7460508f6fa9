"""Which units a rank reads in a training epoch, and the sample count every rank yields.

All ranks compute the same permutation of the split's full units from the same seed and
epoch (`chunk_permutation`). Its positions are dealt to C canonical partitions and the
partitions to the W ranks (`core.canonical_partitions`); a rank reads its units in
permutation order. So rank r holds the positions i with (i mod C) mod W == r: when W
divides C, or C is the split's unit count, that is every W-th unit from r, the deal the
loader always had. The short units go to ranks by size, the same every epoch
(`core.short_unit_deal`), and take seeded places among a rank's full units, so that they
are not always read last.

Every rank's share is the same every epoch and every rank can compute the others', so all
agree on how many samples each yields (`samples_per_rank`) without talking, which keeps
their batch counts equal. An evaluation share (`core.evaluation_shares`) is an
`EpochAssignment` too, drawn in order, never padded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from insitubatch_nodes.core.canonical_partitions import position_ranks
from insitubatch_nodes.core.geometry import UnitSamples
from insitubatch_nodes.core.seeding import rng_for
from insitubatch_nodes.core.short_unit_deal import DEAL_VERSION, deal_split


def chunk_permutation(split_units: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """`split_units` in the order of epoch `epoch`: a pure function of (seed, epoch)."""
    units = np.sort(np.asarray(split_units, dtype=np.int64))
    return units[rng_for(seed, "chunk-permutation", epoch).permutation(units.size)]


@dataclass(frozen=True, eq=False)
class EpochAssignment:
    """One rank's units for one epoch, with the sample counts every rank can agree on.

    `evaluation` marks a fixed share (`core.evaluation_shares`): its samples are drawn in
    order and never padded. `partitions` is the canonical partition count C the training
    deal used (None for an evaluation share, which does not use one). `starts`, for the
    rest of an epoch re-dealt after a resume on another number of ranks (`core.elastic`),
    says how many samples of its draw each unit gave before (None: none, a fresh share).
    """

    seed: int
    epoch: int
    rank: int
    world_size: int
    units: np.ndarray
    rank_samples: int
    min_rank_samples: int
    max_rank_samples: int
    evaluation: bool = False
    partitions: int | None = None
    starts: np.ndarray | None = None

    def samples_per_rank(self, batch_size: int, drop_last: bool) -> int:
        """Samples this rank yields per epoch (see `epoch_samples`).

        Args:
            batch_size: samples per batch.
            drop_last: whether only full batches are yielded (training only).
        """
        return epoch_samples(self, batch_size, drop_last)


def samples_per_rank(
    min_rank_samples: int, max_rank_samples: int, batch_size: int, drop_last: bool
) -> int:
    """Samples every training rank yields per epoch, so that all ranks step the same number
    of times.

    Without `drop_last` each rank yields as many as the largest share; a rank with a smaller
    share pads by repeating draws from its last block. With `drop_last` each rank yields the
    largest multiple of `batch_size` that the smallest share can fill. Shares do not change
    between epochs, so neither does this.

    Args:
        min_rank_samples: the smallest rank's share of the split.
        max_rank_samples: the largest rank's share.
        batch_size: samples per batch.
        drop_last: whether only full batches are yielded.
    """
    if drop_last:
        return (min_rank_samples // batch_size) * batch_size
    return max_rank_samples


class ShareCounts(Protocol):
    """A rank's share of a split beside the smallest and the largest share, and whether it
    is an evaluation share: what the samples it yields per epoch follow from
    (`EpochAssignment`, and `core.rank_shares.RankShares` before any epoch is dealt)."""

    @property
    def rank_samples(self) -> int: ...

    @property
    def min_rank_samples(self) -> int: ...

    @property
    def max_rank_samples(self) -> int: ...

    @property
    def evaluation(self) -> bool: ...


def epoch_samples(shares: ShareCounts, batch_size: int, drop_last: bool) -> int:
    """Samples one rank yields per epoch: in evaluation its own share, each sample once;
    in training the count every rank yields (`samples_per_rank`). The one rule both the
    shuffle node (when an epoch's first block arrives) and `len(loader)` (before anything is
    read) use.

    Args:
        shares: the rank's share, the smallest and the largest, and whether they are
            evaluation shares (`core.evaluation_shares.assign_evaluation`).
        batch_size: samples per batch.
        drop_last: whether only full batches are yielded (training only).
    """
    if shares.evaluation:
        return shares.rank_samples
    return samples_per_rank(shares.min_rank_samples, shares.max_rank_samples, batch_size, drop_last)


def _scatter_short_units(mine: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Move the last `count` units (the short ones) to seeded places in the share, so the
    short units are not always read last; one insertion per short unit, not per sample."""
    placed = mine[:-count]
    for unit in mine[-count:].tolist():
        placed = np.insert(placed, int(rng.integers(placed.size + 1)), unit)
    return placed


def check_rank(rank: int, world_size: int) -> None:
    """Refuse a world size below 1 or a rank outside [0, world_size).

    Args:
        rank: the process's rank.
        world_size: the number of ranks.
    """
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
    partitions: int | None = None,
    deal: int = DEAL_VERSION,
) -> EpochAssignment:
    """Rank `rank`'s units for `epoch` (see the module): its full units in the epoch's
    permutation order, its short units at seeded places among them.

    Args:
        geometry: how many samples each unit holds.
        split_units: the split's units.
        seed: the loader's seed.
        epoch: the epoch.
        rank: this process's rank, in [0, world_size).
        world_size: how many ranks share the split.
        partitions: C, the canonical partition count (None:
            `core.canonical_partitions.default_partition_count` of the split's units).
        deal: the version of the short units' deal (`core.short_unit_deal.DEAL_VERSION`;
            an older one for a state saved under it).
    """
    check_rank(rank, world_size)
    dealt = deal_split(geometry, split_units, world_size, partitions, deal)
    permuted = chunk_permutation(dealt.full, seed, epoch)
    owners = position_ranks(permuted.size, dealt.partitions, world_size)
    mine_short = dealt.short[dealt.short_ranks == rank]
    mine = np.concatenate([permuted[owners == rank], mine_short])
    if mine_short.size:
        mine = _scatter_short_units(mine, mine_short.size, rng_for(seed, "ragged-slot", epoch))
    return EpochAssignment(
        seed=seed,
        epoch=epoch,
        rank=rank,
        world_size=world_size,
        units=mine,
        rank_samples=int(dealt.counts[rank]),
        min_rank_samples=int(dealt.counts.min()),
        max_rank_samples=int(dealt.counts.max()),
        partitions=dealt.partitions,
    )
