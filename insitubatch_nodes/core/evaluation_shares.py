"""Which units a rank reads in evaluation: a fixed contiguous share, the same every epoch.

The split's units in increasing order are cut into W contiguous runs of about equal
sample counts, rank r taking the r-th. Every sample is yielded exactly once across the
ranks and none is repeated to even the ranks out, so the ranks' last batches, and their
batch counts, may differ; the ranks' samples put end to end are the split in order,
whatever the world size. The order never depends on the seed or the epoch.
"""

from __future__ import annotations

import itertools

import numpy as np

from insitubatch_nodes.core.geometry import UnitSamples
from insitubatch_nodes.core.partition import EpochAssignment, check_rank


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
