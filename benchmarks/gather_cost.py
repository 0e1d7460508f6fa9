"""Host time and numpy calls of one `nodes.gather.gather` per batch, on a pool draw.

A pool batch draws its samples from tens of units, each in a block of its own, and the
gather runs on the producer thread, where its Python work competes with the training
loop for the GIL. This times the gather alone, on the draw the pool makes at the ERA5
shape (`--samples` samples from `--units` one-unit blocks leased from one `BlockSlots`,
4 float32 variables of (121, 240), 24 steps per chunk); `--grid 1 1` leaves the copy out,
and with it what the gather costs per batch apart from its bytes, and counts the numpy functions
and array methods it calls per batch (subscripts, such as a fancy index, are not calls
and are not counted). A gatherer that keeps per-block state is warmed on the same
blocks first, as the pool's blocks are drawn from by many batches. `--interleave` gives
the draw an order of its own, as the pool's order version 3 does (`BatchDraw.order`).

    python -m benchmarks.gather_cost
    python -m benchmarks.gather_cost --units 25 --samples 32 --repeats 2000
    python -m benchmarks.gather_cost --grid 1 1
    python -m benchmarks.gather_cost --interleave
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from insitubatch_nodes.cli.synthetic import ERA5_GRID, ERA5_VARIABLES
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.read_plan import plan_block
from insitubatch_nodes.io.reads.block_slots import BlockSlots
from insitubatch_nodes.nodes.gather import batch_shapes, gather
from insitubatch_nodes.nodes.items import BatchDraw, FetchedBlock


def pool_draw(
    units: int,
    samples: int,
    steps_per_chunk: int,
    grid: tuple[int, ...],
    seed: int,
    interleave: bool = False,
) -> BatchDraw:
    """A draw of `samples` rows from `units` one-unit blocks in one set of block slots,
    each block's rows at random within its unit, as the pool's draw lays them out.

    Args:
        units: blocks the draw takes rows from (one unit each).
        samples: rows of the draw (at least `units`).
        steps_per_chunk: rows of a unit (one chunk).
        grid: each sample's shape.
        seed: seeds the rows and the blocks' contents.
        interleave: give the draw a random order of its rows (`BatchDraw.order`).
    """
    rng = np.random.default_rng(seed)
    layout = VariableLayout((units * steps_per_chunk, *grid), (steps_per_chunk, *grid), "float32")
    layouts = {name: layout for name in ERA5_VARIABLES}
    geometry = SampleGeometry.from_layouts(layouts)
    assignment = assign_epoch(
        geometry, np.arange(geometry.num_units), seed=0, epoch=0, rank=0, world_size=1
    )
    sample_bytes = len(layouts) * int(np.prod(grid)) * 4
    slots = BlockSlots(layouts, capacity_bytes=units * steps_per_chunk * sample_bytes)
    blocks = []
    for index, unit in enumerate(assignment.units.tolist()):
        plan = plan_block(geometry, np.array([unit]), assignment=assignment, block_index=index)
        memory = slots.lease(plan)
        blocks.append(FetchedBlock(plan, memory.arrays, None, memory))
    for array in blocks[0].arrays.values():  # the backing arrays, shared by every block
        array[...] = rng.standard_normal(array.shape[1:], dtype=np.float32)
    counts = np.ones(units, dtype=np.int64)
    np.add.at(counts, rng.integers(0, units, samples - units), 1)
    parts = tuple(
        (block, rng.choice(block.plan.num_samples, int(count), replace=False))
        for block, count in zip(blocks, counts.tolist(), strict=True)
    )
    return BatchDraw(parts, order=rng.permutation(samples) if interleave else None)


def numpy_calls(call: Callable[[], Any]) -> int:
    """Numpy functions and array methods `call` calls (C-level calls into numpy)."""
    count = 0

    def tally(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        if event == "c_call":
            owner = getattr(arg, "__self__", None)
            module = getattr(arg, "__module__", None) or type(owner).__module__
            if module and module.startswith("numpy"):
                count += 1

    sys.setprofile(tally)
    try:
        call()
    finally:
        sys.setprofile(None)
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=25)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--steps-per-chunk", type=int, default=24)
    parser.add_argument("--grid", type=int, nargs="+", default=list(ERA5_GRID))
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--interleave", action="store_true")
    args = parser.parse_args()
    grid = tuple(args.grid)
    draw = pool_draw(
        args.units, args.samples, args.steps_per_chunk, grid, args.seed, args.interleave
    )
    out = {key: np.empty(shape, dtype=dtype) for key, (shape, dtype) in batch_shapes(draw).items()}
    gatherer = make_gatherer()

    def once() -> None:
        gatherer(draw, out)

    once()  # warm: pages of the output, and any per-block state
    times = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        once()
        times.append(time.perf_counter() - started)
    calls = numpy_calls(once)
    print(
        f"gather of {args.samples} samples{' interleaved' if args.interleave else ''} from "
        f"{args.units} blocks x {len(ERA5_VARIABLES)} "
        f"variables {grid} float32: median {statistics.median(times) * 1e6:.1f} us, "
        f"p10 {np.percentile(times, 10) * 1e6:.1f} us, p90 {np.percentile(times, 90) * 1e6:.1f} "
        f"us, {calls} numpy calls per batch"
    )


def make_gatherer() -> Callable[[BatchDraw, dict[str, np.ndarray]], Any]:
    """`gather` as the gather node calls it: each block's index table kept while it lives."""
    tables: weakref.WeakKeyDictionary[FetchedBlock, np.ndarray] = weakref.WeakKeyDictionary()
    return functools.partial(gather, tables=tables)


if __name__ == "__main__":
    main()
