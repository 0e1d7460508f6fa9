"""How a training epoch deals a split's units to the ranks: the full units by their
positions in the epoch's permutation (`core.canonical_partitions`), the short ones by
size, to the same ranks every epoch; so every rank's sample count is the same every
epoch, and is counted here.

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
equal across ranks (`core.partition.samples_per_rank`).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.canonical_partitions import (
    check_partitions,
    default_partition_count,
    position_ranks,
)
from insitubatch_nodes.core.deal_version_1 import version_1_short_ranks
from insitubatch_nodes.core.geometry import UnitSamples

DEAL_VERSION = 2
"""How a training epoch deals its short units, recorded in `ChunkPermuteNode`'s state. 1:
they took the positions after the full units, in unit order, so with two or more a rank
could hold one unit more than another and a short one besides, padding past a unit
(`core.deal_version_1`). 2: each, the largest first, to the rank holding the fewest
samples (see the module)."""
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


@dataclass(frozen=True)
class SplitDeal:
    """A split's units as an epoch deals them, the same every epoch: what each epoch's
    order (`core.partition.assign_epoch`) and every rank's sample count start from.

    Args:
        full: the full units, sorted (each epoch permutes them).
        short: the short units, sorted.
        short_ranks: the rank holding each short unit.
        counts: every rank's samples per epoch.
        partitions: C, the canonical partition count.
    """

    full: np.ndarray
    short: np.ndarray
    short_ranks: np.ndarray
    counts: np.ndarray
    partitions: int


def deal_split(
    geometry: UnitSamples,
    split_units: np.ndarray,
    world_size: int,
    partitions: int | None,
    deal: int,
) -> SplitDeal:
    """The split dealt to `world_size` ranks (see the module), checked: a deal version this
    library deals, at least one unit per rank, C in [world_size, units].

    Args:
        geometry: how many samples each unit holds.
        split_units: the split's units.
        world_size: the number of ranks.
        partitions: C, the canonical partition count (None: `default_partition_count`).
        deal: the version of the short units' deal.
    """
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
    if deal == 1:
        short_ranks = version_1_short_ranks(full.size, short.size, partitions, world_size)
    else:
        short_ranks = _to_the_fewest_samples(geometry, short, full_loads)
    counts = full_loads.copy()
    np.add.at(counts, short_ranks, geometry.unit_sizes(short))
    return SplitDeal(full, short, short_ranks, counts, partitions)


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
    return deal_split(geometry, split_units, world_size, partitions, deal).counts


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
    ours = deal_split(geometry, split_units, world_size, partitions, deal)
    first = deal_split(geometry, split_units, world_size, partitions, 1)
    return bool(np.array_equal(ours.short_ranks, first.short_ranks))


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


def _to_the_fewest_samples(
    geometry: UnitSamples, short: np.ndarray, full_loads: np.ndarray
) -> np.ndarray:
    """The rank holding each short unit (`short` sorted) under version 2, once the full
    units gave each rank `full_loads` samples: the smallest share's, the largest unit
    first (see the module), one heap step per short unit."""
    heap = [(load, r) for r, load in enumerate(full_loads.tolist())]
    heapq.heapify(heap)
    sizes = geometry.unit_sizes(short)
    ranks = np.empty(short.size, dtype=np.int64)
    for i in np.lexsort((short, -sizes)).tolist():
        load, r = heapq.heappop(heap)
        ranks[i] = r
        heapq.heappush(heap, (load + int(sizes[i]), r))
    return ranks
