"""Which units a rank reads in an epoch: a (seed, epoch) permutation dealt out round-robin,
or, for evaluation, a fixed contiguous share.

Training: all ranks compute the same permutation from the same seed and epoch. Its
positions are dealt to C canonical partitions (position i to partition i mod C), and the
W physical ranks take partitions (partition p to rank p mod W); a rank reads its units in
permutation order. So rank r holds the positions i with (i mod C) mod W == r: when W
divides C, or C is the split's unit count, that is every W-th unit from r, the deal the
loader always had (`partitions == world_size` is exactly it). When W does not divide C,
ranks hold C // W or C // W + 1 partitions, so they differ by at most a partition's units
(about units / C, under two units with the default C). C is fixed for a run
(`default_partition_count`, recorded in the state's config).

Only full units are permuted. The short ones (the array's ragged end, a split's edges
under windows or a stride) are dealt after them, the same way every epoch (`DEAL_VERSION`):
each, the largest first (ties: the lower unit), to the rank holding the fewest samples so
far (ties: the lower rank). The bound, with L a full unit's samples: giving s < L to the
smallest share m makes the largest max(M, m + s) and leaves the smallest >= m, so the
spread largest - smallest stays at most max(spread before, L). Round-robin deals the full
units within one unit of each other, so every share ends within L of the largest, and no
rank pads more than one unit's worth; when W does not divide C, within the partitions'
own spread. Every rank's share, and the padding to the largest share, is the same every
epoch, and each rank can compute every other rank's share, so it knows the common
per-rank sample count without talking to the others, which is what keeps batch counts
equal across ranks (see `samples_per_rank`).

Evaluation (`assign_evaluation`): the split's units in increasing order are cut into W
contiguous runs of about equal sample counts, rank r taking the r-th. Every sample is
yielded exactly once across the ranks and none is repeated to even the ranks out, so the
ranks' last batches, and their batch counts, may differ; the ranks' samples put end to end
are the split in order, whatever the world size. The order never depends on the seed or
the epoch.
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.geometry import UnitSamples
from insitubatch_nodes.core.seeding import rng_for

PARTITION_MULTIPLE = 48
"""The default partition count is a multiple of this: lcm(1, 2, 3, 4, 6, 8, 12, 16, 24), so
that the common GPU counts divide it."""

DEAL_VERSION = 2
"""How a training epoch deals its short units, recorded in `ChunkPermuteNode`'s state. 1:
they took the positions after the full units, in unit order, so with two or more a rank
could hold one unit more than another and a short one besides, padding past a unit. 2: each,
the largest first, to the rank holding the fewest samples (see the module)."""
DEAL_VERSIONS = (1, 2)


def check_deal(deal: int) -> None:
    """Refuse a deal version this library does not deal.

    Args:
        deal: the version (`DEAL_VERSION`, or one a state recorded).
    """
    if deal not in DEAL_VERSIONS:
        known = " and ".join(map(str, DEAL_VERSIONS))
        raise ValueError(
            f"deal version {deal!r} is not one this library deals (it deals versions "
            f"{known}): the state was saved by a later release; resume it with that release, "
            f"or start the run without the state"
        )


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


def _short_unit_ranks(
    geometry: UnitSamples,
    short: np.ndarray,
    full_loads: np.ndarray,
    partitions: int,
    deal: int,
) -> np.ndarray:
    """The rank holding each short unit (`short` sorted), once the full units gave each
    rank `full_loads` samples: under version 1 the ranks of the positions after the full
    units; under version 2 the smallest share's, the largest unit first (see the module),
    one heap step per short unit."""
    world_size = full_loads.size
    if deal == 1:
        full_units = int(full_loads.sum()) // geometry.unit_length
        return position_ranks(full_units + short.size, partitions, world_size)[full_units:]
    heap = [(load, r) for r, load in enumerate(full_loads.tolist())]
    heapq.heapify(heap)
    sizes = geometry.unit_sizes(short)
    ranks = np.empty(short.size, dtype=np.int64)
    for i in np.lexsort((short, -sizes)).tolist():
        load, r = heapq.heappop(heap)
        ranks[i] = r
        heapq.heappush(heap, (load + int(sizes[i]), r))
    return ranks


@dataclass(frozen=True)
class _Deal:
    """A split's units as an epoch deals them, the same every epoch: the full units (each
    epoch permutes them), the short units with the rank each goes to, every rank's sample
    count and C."""

    full: np.ndarray
    short: np.ndarray
    short_ranks: np.ndarray
    counts: np.ndarray
    partitions: int


def _deal(
    geometry: UnitSamples,
    split_units: np.ndarray,
    world_size: int,
    partitions: int | None,
    deal: int,
) -> _Deal:
    """The split dealt to `world_size` ranks (see the module), checked."""
    check_deal(deal)
    full, short = _full_and_short(geometry, split_units)
    total = full.size + short.size
    if total < world_size:
        raise ValueError(
            f"the split has {total} chunk-aligned units, fewer than world_size="
            f"{world_size}: every rank needs at least one; use fewer ranks or a larger split"
        )
    partitions = default_partition_count(total) if partitions is None else partitions
    check_partitions(partitions, total, world_size)
    full_ranks = position_ranks(full.size, partitions, world_size)
    full_loads = np.bincount(full_ranks, minlength=world_size) * np.int64(geometry.unit_length)
    short_ranks = _short_unit_ranks(geometry, short, full_loads, partitions, deal)
    counts = full_loads.copy()
    np.add.at(counts, short_ranks, geometry.unit_sizes(short))
    return _Deal(full, short, short_ranks, counts, partitions)


def rank_sample_counts(
    geometry: UnitSamples,
    split_units: np.ndarray,
    world_size: int,
    partitions: int | None = None,
    deal: int = DEAL_VERSION,
) -> np.ndarray:
    """Samples each rank holds per epoch: the same every epoch, since which rank holds
    each short unit never depends on the epoch (see the module).

    Args:
        geometry: how many samples each unit holds.
        split_units: the split's units.
        world_size: the number of ranks.
        partitions: C, the canonical partition count (None: `default_partition_count`).
        deal: the version of the short units' deal (`DEAL_VERSION`; an older one for a
            state saved under it).
    """
    return _deal(geometry, split_units, world_size, partitions, deal).counts


def deals_like_version_1(
    geometry: UnitSamples,
    split_units: np.ndarray,
    world_size: int,
    partitions: int | None,
    deal: int = DEAL_VERSION,
) -> bool:
    """Whether deal `deal` gives every rank the units version 1 gave it, every epoch (so a
    state need not say which it was dealt by): true when the short units go to the same
    ranks, e.g. round-robin with one short unit.

    Args:
        geometry: how many samples each unit holds.
        split_units: the split's units.
        world_size: the number of ranks.
        partitions: C (None: `default_partition_count`).
        deal: the version held against version 1.
    """
    ours = _deal(geometry, split_units, world_size, partitions, deal)
    first = _deal(geometry, split_units, world_size, partitions, 1)
    return bool(np.array_equal(ours.short_ranks, first.short_ranks))


@dataclass(frozen=True, eq=False)
class EpochAssignment:
    """One rank's units for one epoch, with the sample counts every rank can agree on.

    `evaluation` marks a fixed share (`assign_evaluation`): its samples are drawn in
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
        return epoch_samples(
            self.rank_samples,
            self.min_rank_samples,
            self.max_rank_samples,
            batch_size,
            drop_last,
            evaluation=self.evaluation,
        )


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


def epoch_samples(
    rank_samples: int,
    min_rank_samples: int,
    max_rank_samples: int,
    batch_size: int,
    drop_last: bool,
    *,
    evaluation: bool,
) -> int:
    """Samples one rank yields per epoch: in evaluation its own share, each sample once;
    in training the count every rank yields (`samples_per_rank`). The one rule both the
    shuffle node (when an epoch's first block arrives) and `len(loader)` (before anything is
    read) use.

    Args:
        rank_samples: this rank's share of the split.
        min_rank_samples: the smallest rank's share.
        max_rank_samples: the largest rank's share.
        batch_size: samples per batch.
        drop_last: whether only full batches are yielded (training only).
        evaluation: whether the share is an evaluation share (`assign_evaluation`).
    """
    if evaluation:
        return rank_samples
    return samples_per_rank(min_rank_samples, max_rank_samples, batch_size, drop_last)


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
        partitions: C, the canonical partition count (None: `default_partition_count` of
            the split's units).
        deal: the version of the short units' deal (`DEAL_VERSION`; an older one for a
            state saved under it).
    """
    check_rank(rank, world_size)
    dealt = _deal(geometry, split_units, world_size, partitions, deal)
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


def evaluation_shares(
    geometry: UnitSamples, split_units: np.ndarray, world_size: int
) -> list[np.ndarray]:
    """The split's units in increasing order, cut into `world_size` contiguous runs of about
    equal sample counts (each run holds at least one unit). Contiguous runs keep each
    rank's reads sequential and a window's halo shared by neighbouring units.

    Args:
        geometry: how many samples each unit holds.
        split_units: the split's units.
        world_size: how many ranks share the split.
    """
    units = np.sort(np.asarray(split_units, dtype=np.int64))
    if units.size < world_size:
        raise ValueError(
            f"the split has {units.size} chunk-aligned units, fewer than world_size="
            f"{world_size}: every rank needs at least one; use fewer ranks or a larger split"
        )
    ends = np.cumsum(geometry.unit_sizes(units))  # samples up to and including each unit
    total = int(ends[-1])
    cuts = [0]
    for r in range(1, world_size):
        # the unit boundary nearest to r/W of the samples, leaving each rank a unit
        wanted = total * r / world_size
        after = int(np.searchsorted(ends, wanted))  # first unit ending at or past it
        before_gap = wanted - (ends[after - 1] if after > 0 else 0)
        after_gap = ends[after] - wanted if after < units.size else np.inf
        cut = after + 1 if after_gap < before_gap else after
        cuts.append(min(max(cut, cuts[-1] + 1), units.size - (world_size - r)))
    cuts.append(units.size)
    return [units[a:b] for a, b in itertools.pairwise(cuts)]


def assign_evaluation(
    geometry: UnitSamples,
    split_units: np.ndarray,
    *,
    seed: int,
    epoch: int,
    rank: int,
    world_size: int,
) -> EpochAssignment:
    """Rank `rank`'s evaluation share (`evaluation_shares`), the same every epoch.

    Args:
        geometry: how many samples each unit holds.
        split_units: the split's units.
        seed: recorded only (the share does not depend on it).
        epoch: recorded only (the share does not depend on it).
        rank: this process's rank, in [0, world_size).
        world_size: how many ranks share the split.
    """
    check_rank(rank, world_size)
    shares = evaluation_shares(geometry, split_units, world_size)
    counts = [int(geometry.unit_sizes(share).sum()) for share in shares]
    return EpochAssignment(
        seed=seed,
        epoch=epoch,
        rank=rank,
        world_size=world_size,
        units=shares[rank],
        rank_samples=counts[rank],
        min_rank_samples=min(counts),
        max_rank_samples=max(counts),
        evaluation=True,
    )
