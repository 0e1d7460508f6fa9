"""What the pool shuffle's ramp costs an epoch's first batches, before any read.

With a ramp (`core.pool_order`, `pool_ramp`), an epoch's first batch waits only for
`ramp` batches' samples to be read, not for P units; the price is mixing: until the pool
holds P units, its batches draw from fewer units than a full pool's. `insitubatch inspect`
states both sides, so a user choosing `pool_ramp` sees what each setting buys: how many
batches of an epoch draw from a pool still filling, how many distinct units those batches
mix, and how much the first batch waits for.

The numbers come from the order's own rule, run for one epoch's start: the refill is
`pool_order.enters_pool` and each batch's draw is `pool_order.pool_take`, so they are
those of the batches a loader would yield for that seed, epoch and rank (the tests hold
them against `pool_order.pool_epoch_order`). Only sample counts are followed, never sample
ids, and only until the pool is full. A batch's draw costs time in the units the pool
holds, so a pool of tens of thousands of one-step units that ramps for hundreds of
batches would take seconds to follow: past `FOLLOWED_UNITS` units drawn over, the ramp
is reported as lasting at least the batches followed, and the mixing as theirs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.geometry import UnitSamples
from insitubatch_nodes.core.partition import EpochAssignment
from insitubatch_nodes.core.pool_order import enters_pool, pool_take

# Pool units drawn over (summed over batches) before the ramp stops being followed: about
# half a second of `pool_take`.
FOLLOWED_UNITS = 3_000_000


@dataclass(frozen=True)
class PoolRamp:
    """An epoch's start under the pool shuffle.

    Args:
        batches: the epoch's first batches drawn from a pool still filling: before each,
            the pool held fewer than P units and more were still to enter. 0 without a
            ramp, or when the first batch's pool already holds P units. At least that
            many when `followed_all` is False.
        followed_all: whether the ramp was followed to its end (else `FOLLOWED_UNITS`
            ran out first).
        distinct_units: mean distinct units per batch over those batches (0.0 when none).
        first_units: units in the pool when the first batch is drawn: the units read
            before it can be.
        first_samples: the samples those units hold.
        filled_units: the units the first batch would wait for with the pool filled
            first (a ramp of 0): P, or every unit of the epoch when it holds fewer.
        filled_samples: the samples those units hold.
    """

    batches: int
    followed_all: bool
    distinct_units: float
    first_units: int
    first_samples: int
    filled_units: int
    filled_samples: int


def _refilled(
    sizes: np.ndarray,
    next_unit: int,
    resident: int,
    in_pool: int,
    needed: int,
    batch: int,
    *,
    pool_size: int,
    ramp: int,
    batch_size: int,
) -> int:
    """The position of the next unit to enter after the refill before batch `batch`
    (`pool_order.enters_pool`), from `resident` units holding `in_pool` samples."""
    entering = next_unit
    while entering < sizes.size and enters_pool(
        resident + entering - next_unit,
        in_pool,
        needed,
        batch,
        pool_size=pool_size,
        ramp=ramp,
        batch_size=batch_size,
    ):
        in_pool += int(sizes[entering])
        entering += 1
    return entering


def pool_ramp(
    geometry: UnitSamples,
    assignment: EpochAssignment,
    *,
    pool_size: int,
    batch_size: int,
    drop_last: bool,
    ramp: int,
    followed_units: int | None = None,
) -> PoolRamp:
    """How the epoch of `assignment` starts under the pool shuffle (see the module).

    Args:
        geometry: how many samples each unit holds (a `SampleGeometry` or `AnchorSet`).
        assignment: the rank's units for the epoch (`assign_epoch`).
        pool_size: P, the units the pool holds (`pool_order.pool_units`).
        batch_size: samples per batch.
        drop_last: whether only full batches are yielded.
        ramp: how fast the pool fills (`pool_order.enters_pool`); 0: to P at once.
        followed_units: pool units drawn over, summed over batches, before the ramp stops
            being followed (None: `FOLLOWED_UNITS`).
    """
    a = assignment
    sizes = np.asarray(geometry.unit_sizes(a.units), dtype=np.int64)
    target = a.samples_per_rank(batch_size, drop_last)
    left = int(sizes.sum())
    remaining = np.zeros(0, dtype=np.int64)  # samples each pool unit has left, pool order
    next_unit = yielded = batch = 0
    first_units = first_samples = 0
    distinct: list[int] = []
    followed_all = True
    budget = FOLLOWED_UNITS if followed_units is None else followed_units
    shape = {"pool_size": pool_size, "batch_size": batch_size}
    needed = min(batch_size, target, left)
    filled = _refilled(sizes, 0, 0, 0, needed, 0, ramp=0, **shape) if target else 0
    while yielded < target:
        want = min(batch_size, target - yielded)
        real = min(want, left)
        in_pool = int(remaining.sum())
        entering = _refilled(
            sizes, next_unit, remaining.size, in_pool, real, batch, ramp=ramp, **shape
        )
        remaining = np.concatenate([remaining, sizes[next_unit:entering]])
        next_unit = entering
        if batch == 0:
            first_units, first_samples = int(remaining.size), int(remaining.sum())
        if remaining.size >= pool_size or next_unit == sizes.size:
            break  # full, or holding every unit left: the ramp is over
        budget -= remaining.size
        if budget < 0:
            followed_all = False
            break
        counts = pool_take(a.seed, a.epoch, a.rank, batch, remaining, real)
        distinct.append(int(np.count_nonzero(counts)))
        remaining = remaining - counts
        remaining = remaining[remaining > 0]
        left -= real
        yielded += want
        batch += 1
    return PoolRamp(
        batches=len(distinct),
        followed_all=followed_all,
        distinct_units=float(np.mean(distinct)) if distinct else 0.0,
        first_units=first_units,
        first_samples=first_samples,
        filled_units=filled,
        filled_samples=int(sizes[:filled].sum()),
    )
