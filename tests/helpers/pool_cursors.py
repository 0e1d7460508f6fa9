"""The pool's ramp read off the pure order (`core.pool_order.pool_draw`'s cursors and
`pool_epoch_order`'s batches), for tests that hold a prediction of it against the order:
`core.pool_ramp` in test_core_pool_ramp, `insitubatch inspect` in test_inspect."""

from __future__ import annotations

import numpy as np

from insitubatch_nodes.core.geometry import UnitSamples
from insitubatch_nodes.core.partition import EpochAssignment
from insitubatch_nodes.core.pool_order import pool_draw


def filling_batches(
    geometry: UnitSamples, a: EpochAssignment, pool_size: int, batch_size: int, ramp: int
) -> int:
    """The pure order's first batches whose pool, as they drew, held fewer than P units
    while more were still to enter: from its cursors before and after each batch."""
    kw = {"seed": a.seed, "epoch": a.epoch, "rank": a.rank, "units": a.units}
    kw |= {"starts": np.zeros(a.units.size, dtype=np.int64), "ramp": ramp}
    kw |= {"target": a.samples_per_rank(batch_size, False), "pool_size": pool_size}
    batches = -(-kw["target"] // batch_size)
    for b in range(batches):
        _, before = pool_draw(geometry, batch_size=batch_size, batches=b, **kw)
        _, after = pool_draw(geometry, batch_size=batch_size, batches=b + 1, **kw)
        units = len(before.resident) + after.next_unit - before.next_unit
        if units >= pool_size or after.next_unit == a.units.size:
            return b
    return batches


def distinct_units(geometry: UnitSamples, a: EpochAssignment, order: np.ndarray) -> list[int]:
    """Distinct units in each batch-sized slice of `order` (sample ids)."""
    unit_of = {int(s): int(u) for u in a.units for s in geometry.unit_samples(np.array([u]))}
    return [len({unit_of[int(s)] for s in batch}) for batch in order]


def first_wait(
    geometry: UnitSamples, a: EpochAssignment, pool_size: int, batch_size: int, ramp: int
) -> int:
    """Units in the pure order's pool when its first batch draws."""
    kw = {"seed": a.seed, "epoch": a.epoch, "rank": a.rank, "units": a.units}
    kw |= {"starts": np.zeros(a.units.size, dtype=np.int64), "pool_size": pool_size}
    kw |= {"target": a.samples_per_rank(batch_size, False), "batch_size": batch_size}
    return pool_draw(geometry, ramp=ramp, batches=1, **kw)[1].next_unit
