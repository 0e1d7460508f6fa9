"""Shuffle quality of the block order against the pool order (issue 17), from the pure
orders (the loader yields exactly these, `tests/nodes/test_pool_shuffle.py`): a year of hourly
ERA5-shaped steps (4 x float32 (121, 240)), batch 32, the default block size and pool, and
the pool with revisits (its units are visits of a chunk; distinct units still count the
store's chunks of `steps_per_chunk` steps, against a uniform shuffle over them).

The pool runs at its defaults (order version 3: the ramp, batches interleaved), with its
batches grouped by unit (`pool_interleave=False`, version 2), and without a ramp either
(`pool_ramp=0`, the pool filled to P before the first batch, version 1): the ramp's price
is paid in an epoch's first batches, which the `first 10` column scores alone; a store of
fewer units than P (the benchmarks' 1,920 steps at 24 per chunk) pays it over more of its
epoch. The interleave changes only the order within batches: the gap between neighbouring
samples, which a micro-batch (a contiguous slice of a batch) sees.

Run: `python benchmarks/shuffle_quality.py`.
"""

from __future__ import annotations

import numpy as np

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.draw_order import rank_epoch_order
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.memory_bound import (
    SHUFFLE_WINDOW_BYTES,
    block_sizing_budget,
    loader_block_chunks,
    unit_nbytes,
)
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.pool_order import POOL_RAMP, pool_epoch_order, pool_units
from insitubatch_nodes.core.quality import (
    distinct_units_per_batch,
    gap_score,
    mean_time_distance,
    uniform_distinct_units,
    uniform_time_distance,
)
from insitubatch_nodes.core.sample_spec import SampleSpec, leads, window

BATCH = 32
STEPS = 8760
REVISITS = (2,)  # visits per unit (`build_loader(revisits=)`): distinct counts store chunks
FIRST = 10  # an epoch's first batches, where the pool ramps up


def report(steps_per_chunk: int, recipe: bool = False, steps: int = STEPS) -> None:
    """Print one line per order for `steps_per_chunk`.

    Args:
        steps_per_chunk: the store's chunk length along time.
        recipe: samples as the ERA5 recipe takes them (inputs at t-1 and t, targets at
            t+1), whose units hold the neighbouring chunks those reach into.
        steps: the store's time steps.
    """
    layouts = {
        f"v{i}": VariableLayout((steps, 121, 240), (steps_per_chunk, 121, 240), "float32")
        for i in range(4)
    }
    spec = None
    if recipe:
        names = list(layouts)
        spec = SampleSpec({"inputs": window(names, steps=2), "targets": leads(names, [1])})
    geometry = SampleGeometry.from_layouts(layouts)
    anchors = AnchorSet.for_steps(geometry, np.array([[0, steps]]), spec)
    a = assign_epoch(anchors, anchors.units, seed=0, epoch=0, rank=0, world_size=1)
    block_chunks = loader_block_chunks(anchors, layouts, None, block_sizing_budget(None))
    pool = pool_units(SHUFFLE_WINDOW_BYTES, unit_nbytes(anchors, layouts), steps_per_chunk, BATCH)
    uniform_d = uniform_distinct_units(anchors.unit_sizes(anchors.units), BATCH)
    uniform_t = uniform_time_distance(anchors.unit_samples(anchors.units))
    orders = {
        f"block ({block_chunks} units)": rank_epoch_order(
            anchors, a, block_chunks=block_chunks, batch_size=BATCH, drop_last=True
        ),
        f"pool (P={pool})": pool_epoch_order(
            anchors, a, pool_size=pool, batch_size=BATCH, drop_last=True
        ),
        f"pool (P={pool}) v2": pool_epoch_order(
            anchors, a, pool_size=pool, batch_size=BATCH, drop_last=True, interleave=False
        ),
        f"pool (P={pool}) v1": pool_epoch_order(
            anchors, a, pool_size=pool, batch_size=BATCH, drop_last=True, ramp=0, interleave=False
        ),
    }
    for revisits in (r for r in REVISITS if steps_per_chunk % r == 0):
        visits = AnchorSet.for_steps(geometry.visits(revisits), np.array([[0, steps]]), spec)
        v = assign_epoch(visits, visits.units, seed=0, epoch=0, rank=0, world_size=1)
        size = pool_units(
            SHUFFLE_WINDOW_BYTES, unit_nbytes(visits, layouts), visits.unit_length, BATCH
        )
        orders[f"pool r={revisits} (P={size})"] = pool_epoch_order(
            visits, v, pool_size=size, batch_size=BATCH, drop_last=True
        )
    for name, order in orders.items():
        batches = list(order.reshape(-1, BATCH))
        d = distinct_units_per_batch(batches, steps_per_chunk)
        early = distinct_units_per_batch(batches[:FIRST], steps_per_chunk)
        t = mean_time_distance(batches)
        # a batch is a set to the step; version 2 hands its samples out grouped by unit,
        # which the gap between neighbours counts against it (version 3 interleaves them)
        as_sets = np.concatenate(
            [np.random.default_rng(i).permutation(b) for i, b in enumerate(batches)]
        )
        label = f"{steps_per_chunk:>2} steps/chunk{' recipe' if recipe else ''}"
        if steps != STEPS:
            label += f" ({steps} steps, {anchors.units.size} units)"
        print(
            f"{label} {name:25s} distinct/B {d / BATCH:.2f} "
            f"(uniform {uniform_d / BATCH:.2f}, x{d / uniform_d:.2f}; first {FIRST} "
            f"x{early / uniform_d:.2f}); time distance x{t / uniform_t:.2f}; gap "
            f"{gap_score(np.asarray(order)):.2f} (batches as sets {gap_score(as_sets):.2f})"
        )


if __name__ == "__main__":
    for steps in (24, 4, 1):
        report(steps)
    report(4, recipe=True)  # the ERA5 recipe's samples on its default units of 4 steps
    report(24, steps=1920)  # `benchmarks.defaults`' store: fewer units than P
    print(f"(the pool's default ramp: pool_ramp={POOL_RAMP})")
