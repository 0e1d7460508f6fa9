"""How many samples each rank holds of a split, and whether a batch setting leaves every
rank a batch.

Both are known before anything is read, from the split's units and the ranks alone
(`core.short_unit_deal` and `core.evaluation_shares` deal them), so a loader that cannot
give a full batch is refused when it is planned, not when its first block arrives;
`ChunkPermuteNode` asks the same functions again when it takes a process group's rank and
world size later.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.canonical_partitions import default_partition_count
from insitubatch_nodes.core.evaluation_shares import evaluation_shares
from insitubatch_nodes.core.geometry import UnitSamples
from insitubatch_nodes.core.partition import check_rank, epoch_samples
from insitubatch_nodes.core.settings import as_bool, as_int
from insitubatch_nodes.core.short_unit_deal import DEAL_VERSION, rank_sample_counts

EVALUATION_DROP_LAST = (
    "drop_last=True drops samples, and an evaluation loader yields every sample of the split "
    "once (its ranks' last batches may be short); leave drop_last False"
)


@dataclass(frozen=True)
class RankShares:
    """One rank's share of a split per epoch, beside the smallest and the largest share:
    the same every epoch, which is what lets every rank agree on a batch count alone.

    Args:
        rank_samples: this rank's share, in samples.
        min_rank_samples: the smallest rank's share.
        max_rank_samples: the largest rank's share.
        partitions: C, the canonical partitions a training epoch's units are dealt to
            (`core.canonical_partitions`); recorded for evaluation too, which does not deal by them.
        evaluation: whether the shares are evaluation shares (each sample once, no
            padding), not a training deal.
    """

    rank_samples: int
    min_rank_samples: int
    max_rank_samples: int
    partitions: int
    evaluation: bool = False

    def samples_per_epoch(self, batch_size: int, drop_last: bool) -> int:
        """Samples this rank yields per epoch (`core.partition.epoch_samples`).

        Args:
            batch_size: samples per batch.
            drop_last: whether only full batches are yielded.
        """
        return epoch_samples(self, batch_size, drop_last)


def rank_shares(
    geometry: UnitSamples,
    split_units: np.ndarray,
    *,
    rank: int,
    world_size: int,
    partitions: int | None,
    evaluation: bool,
    deal: int = DEAL_VERSION,
) -> RankShares:
    """Every rank's share of the split, as `rank` sees it; an error when the split has fewer
    units than ranks, or a partition count outside [world_size, units].

    Args:
        geometry: how many samples each unit holds.
        split_units: the split's units (none empty).
        rank: this process's rank, in [0, world_size).
        world_size: how many ranks share the split.
        partitions: C, or None for `default_partition_count` of the split's units.
        evaluation: contiguous evaluation shares (`evaluation_shares`) rather than the
            training deal.
        deal: the version of the training deal's short units (`core.short_unit_deal.DEAL_VERSION`;
            an older one for a state saved under it).
    """
    check_rank(rank, world_size)
    units = np.sort(np.asarray(split_units, dtype=np.int64))
    if partitions is None:
        partitions = default_partition_count(int(units.size))
    if evaluation:
        shares = evaluation_shares(geometry, units, world_size)
        counts = np.array([geometry.unit_sizes(share).sum() for share in shares])
    else:
        counts = rank_sample_counts(geometry, units, world_size, partitions, deal)
    return RankShares(
        rank_samples=int(counts[rank]),
        min_rank_samples=int(counts.min()),
        max_rank_samples=int(counts.max()),
        partitions=partitions,
        evaluation=evaluation,
    )


def check_full_batch(shares: RankShares, batch_size: int, drop_last: bool, split: str) -> None:
    """Refuse a `batch_size` and `drop_last` under which the smallest rank's share fills no
    batch, and `drop_last` in evaluation (which yields every sample).

    Args:
        shares: the ranks' shares of the split (`rank_shares`).
        batch_size: samples per batch (an int >= 1).
        drop_last: whether only full batches are yielded (True or False).
        split: the split's name, for the message.
    """
    batch_size = as_int("batch_size", batch_size, minimum=1)
    drop_last = as_bool("drop_last", drop_last)
    if shares.evaluation and drop_last:
        raise ValueError(EVALUATION_DROP_LAST)
    if shares.samples_per_epoch(batch_size, drop_last):
        return
    raise ValueError(
        f"batch_size={batch_size} with drop_last=True leaves no full batch: the smallest "
        f"rank holds {shares.min_rank_samples} samples of split {split!r}; lower "
        f"batch_size or set drop_last=False"
    )
