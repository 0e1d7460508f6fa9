"""How one `memory_budget` covers everything the loader holds at once.

Resident per rank: the shuffle window (block shuffle: the blocks a batch draws from,
fewer than `batch_size` undrawn samples plus the partly drawn oldest block plus the
newest block, so at most `batch_size + 2 * block_samples` samples; pool shuffle: the
pool's P units, freed unit by unit, plus the newest block whose units wait to enter and a
batch's worth for short units, `pool_window_samples`), the batch being gathered, the stored
bytes of chunk reads in flight, and the blocks read ahead. The first three are fixed by
the settings; so are the static fields (`core.static_fields`: each decoded array, once,
and the copies of them host batches hold where stacked or cropped, `StaticCost`);
read-ahead gets what is left, and at least one block must fit. With a
writable chunk cache, the stored bytes waiting for the cache's writing thread
(`io.cache.cache_writes`) take a share of the read-ahead beyond that one block
(`CACHE_QUEUE_SHARE`, at most `CACHE_QUEUE_BYTES`): never more, so a cache neither makes
a budget too small nor changes a block or a pool (the batches); a budget with no room
beyond one block gets no queue, and the cache is written by the decode threads.
`plan_loader_memory` makes that plan for a loader, the block size included, before any
node that the settings go to exists.

The block size changes the batches (samples are shuffled within blocks), so its default
is a pure function of the settings and the store, never of the host's memory: it is sized
against the fixed `BLOCK_SIZING_BUDGET`, or a smaller budget the user gave
(`block_sizing_budget`). A budget left to the host (`builder.loader_choices`) or raised above it
never changes the batches.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.inflight_target import CEILING
from insitubatch_nodes.core.settings import as_int, as_optional_int

# bytes: what default blocks are sized against when the memory budget is left to the host
# (build_loader's fixed default before it read the host, so default batches did not change)
BLOCK_SIZING_BUDGET = 1 << 30
DEFAULT_MEMORY_BUDGET = BLOCK_SIZING_BUDGET  # a hand-built graph's block memory (ReadContext)
LARGEST_BUDGET = 1 << 50  # bytes: searches for a budget that fits give up beyond it
MIN_BLOCK_CHUNKS = 8
MIN_BLOCK_SAMPLES = 64  # per-block work (plan, reads, wake-ups) spread over this many
BLOCKS_PER_BUDGET = 8  # a default block takes at most this fraction of the budget
INFLIGHT_SHARE = 8  # self-tuning reads in flight hold at most this fraction of the budget
CACHE_QUEUE_SHARE = 16  # the cache's queued writes hold at most this fraction of the budget
CACHE_QUEUE_BYTES = 32 << 20  # and never more than this (bytes): enough to even out a burst
# bytes: the pool shuffle's default window (a pure constant, so the order is the host's
# never; a smaller budget the user gives takes half of it instead)
SHUFFLE_WINDOW_BYTES = 1 << 30


def shuffle_window_bytes(shuffle_window: int | None, memory_budget: int | None) -> int:
    """The bytes the pool shuffle's window may hold: `shuffle_window` if given, else
    `SHUFFLE_WINDOW_BYTES`, or half of a smaller `memory_budget` the user gave. Never the
    host's memory: the window sets the pool's size, so the batches.

    Args:
        shuffle_window: the window the user gave, in bytes, or None.
        memory_budget: the budget the user gave, or None when it is the host's.
    """
    if shuffle_window is not None:
        return as_int("shuffle_window", shuffle_window, minimum=1)
    if memory_budget is None:
        return SHUFFLE_WINDOW_BYTES
    return min(SHUFFLE_WINDOW_BYTES, max(1, memory_budget // 2))


def unit_nbytes(anchors: AnchorSet, layouts: Mapping[str, VariableLayout]) -> int:
    """Bytes of one unit's rows (its halo chunks included): what a pool slot holds.

    Args:
        anchors: the samples of the split.
        layouts: the selected arrays, by name.
    """
    return anchors.block_rows_bound(1) * sample_nbytes(layouts)


def pool_window_samples(
    anchors: AnchorSet, pool_size: int, rank_units: int, block_samples: int, batch_size: int
) -> int:
    """Rows the pool shuffle holds at most: its units (P, or the rank's units if fewer),
    the newest block (its units wait to enter), and a batch's worth more (a pool short of
    a batch's samples, which only short units cause, takes in units past P).

    Args:
        anchors: the samples of the split.
        pool_size: P (`core.pool_order.pool_units`).
        rank_units: the most units one rank holds in an epoch.
        block_samples: buffer rows of one block, at most.
        batch_size: samples per batch.
    """
    return anchors.block_rows_bound(min(pool_size, rank_units)) + block_samples + batch_size


def default_block_chunks(unit_samples: int, unit_bytes: int, memory_budget: int) -> int:
    """Units per block when the user names none: enough for `MIN_BLOCK_SAMPLES` samples
    (with one time step per chunk, 8 chunks would be 8 samples, and the fixed cost of a
    block would dominate), as long as a block stays within 1/`BLOCKS_PER_BUDGET` of the
    budget; never fewer than `MIN_BLOCK_CHUNKS`. A pure function of the data's layout, so
    every machine and every resume picks the same blocks.

    Args:
        unit_samples: samples per unit.
        unit_bytes: bytes of one unit's block rows.
        memory_budget: the loader's budget in bytes.
    """
    wanted = -(-MIN_BLOCK_SAMPLES // max(1, unit_samples))
    affordable = memory_budget // (BLOCKS_PER_BUDGET * max(1, unit_bytes))
    return max(MIN_BLOCK_CHUNKS, min(wanted, affordable))


@dataclass(frozen=True)
class StaticCost:
    """What the static fields and the forcings hold beside the fields: the decoded
    statics, once; what the forcings keep (valid times, coordinates and their terms, the
    memory of dropped batches' forcings kept for reuse); and per sample the copies a host
    batch makes of them (stacked channels, crops at patches, the forcings computed on the
    host; 0 for broadcast views).

    Args:
        resident_bytes: the decoded statics (`core.static_fields.static_nbytes`).
        sample_bytes: one sample's copies in a host batch
            (`core.static_fields.static_copy_nbytes`, `core.forcings.ForcingPlan`).
        forcing_bytes: what the forcings keep for the loader's life
            (`core.forcings.ForcingPlan.resident_nbytes`, and the reused memory).
    """

    resident_bytes: int = 0
    sample_bytes: int = 0
    forcing_bytes: int = 0


NO_STATICS = StaticCost()


@dataclass(frozen=True)
class MemoryPlan:
    """How one budget splits, in bytes.

    Args:
        window_bytes: the shuffle window.
        batch_bytes: the batches being gathered (and staged for the device).
        inflight_bytes: chunk reads in flight.
        block_bytes: one block.
        read_ahead_bytes: what is left: the blocks read ahead, at most.
        cache_queue_bytes: stored chunks queued for the chunk cache's writing thread, at
            most (0 without a writable cache).
        static_bytes: the static fields, decoded, kept for the loader's life (their
            copies in batches are in `batch_bytes`).
        forcing_bytes: what the forcings keep for the loader's life (the forcings of a
            batch are in `batch_bytes`).
    """

    window_bytes: int
    batch_bytes: int
    inflight_bytes: int
    block_bytes: int
    read_ahead_bytes: int
    cache_queue_bytes: int = 0
    static_bytes: int = 0
    forcing_bytes: int = 0

    @property
    def blocks_alive_bytes(self) -> int:
        """The blocks alive at once, at most: those in the shuffle window and those read
        ahead (what the fetch node's block slots hold, `io.reads.block_slots`)."""
        return self.window_bytes + self.read_ahead_bytes


def sample_nbytes(layouts: Mapping[str, VariableLayout]) -> int:
    """Bytes of one sample of every variable.

    Args:
        layouts: the selected arrays, by name.
    """
    return sum(
        math.prod(layout.sample_shape) * np.dtype(layout.dtype).itemsize
        for layout in layouts.values()
    )


def batch_sample_nbytes(layouts: Mapping[str, VariableLayout]) -> int:
    """Bytes of one sample of every variable as a batch holds it: more than a block's
    (`sample_nbytes`) when a level is asked for twice (`VariableLayout.batch_sample_shape`).

    Args:
        layouts: the selected arrays, by name.
    """
    return sum(
        math.prod(layout.batch_sample_shape) * np.dtype(layout.dtype).itemsize
        for layout in layouts.values()
    )


def plan_memory(
    memory_budget: int,
    layouts: Mapping[str, VariableLayout],
    *,
    batch_size: int,
    block_samples: int,
    max_inflight: int | None,
    batches_held: int = 1,
    window_samples: int | None = None,
    cache_writes: bool = False,
    statics: StaticCost = NO_STATICS,
) -> MemoryPlan:
    """Split `memory_budget` (bytes); a budget too small for one block read ahead is an
    error that says what the fixed parts need.

    Args:
        memory_budget: bytes the loader holds at most.
        layouts: the selected arrays, by name.
        batch_size: samples per batch.
        block_samples: buffer rows of one block, at most.
        max_inflight: chunk reads under way at once at most, or None when their number
            follows the store (`core.inflight_target`): they then get an
            `INFLIGHT_SHARE` of the budget, or `CEILING` chunks if less, one at least.
        batches_held: gathered batches alive at once (on CUDA, the page-locked staging
            ring: the device node's prefetch depth plus one).
        window_samples: rows the shuffle window holds at most (the pool shuffle's,
            `pool_window_samples`), or None for the block shuffle's.
        cache_writes: whether a chunk cache is written: its queue then takes a share of
            the read-ahead beyond one block (see the module).
        statics: what the static fields hold (none by default).
    """
    per_sample = sample_nbytes(layouts)
    largest_chunk = max(
        math.prod(layout.chunks) * np.dtype(layout.dtype).itemsize for layout in layouts.values()
    )
    if window_samples is None:
        window_samples = batch_size + 2 * block_samples
    window = window_samples * per_sample
    batch = batches_held * batch_size * (batch_sample_nbytes(layouts) + statics.sample_bytes)
    kept = statics.resident_bytes + statics.forcing_bytes
    # stored bytes are at most about decoded bytes
    if max_inflight is None:
        inflight = max(largest_chunk, min(memory_budget // INFLIGHT_SHARE, CEILING * largest_chunk))
        reads = "chunk reads in flight"
    else:
        inflight = max_inflight * largest_chunk
        reads = f"{max_inflight} chunk reads in flight"
    block = block_samples * per_sample
    read_ahead = memory_budget - window - batch - inflight - kept
    if read_ahead < block:
        static_part = "".join(
            f", the {what} {nbytes}"
            for what, nbytes in (
                ("static fields", statics.resident_bytes),
                ("forcings", statics.forcing_bytes),
            )
            if nbytes
        )
        raise ValueError(
            f"memory_budget={memory_budget} bytes is too small: the shuffle window needs "
            f"{window}, the batch {batch}, {reads} {inflight}{static_part}, and "
            f"one block read ahead {block} (at least "
            f"{window + batch + inflight + kept + block} in all); raise memory_budget, or "
            f"lower block_chunks, batch_size, max_inflight or shuffle_window"
        )
    queue = 0
    if cache_writes:
        queue = min(CACHE_QUEUE_BYTES, memory_budget // CACHE_QUEUE_SHARE, read_ahead - block)
    return MemoryPlan(
        window,
        batch,
        inflight,
        block,
        read_ahead - queue,
        queue,
        statics.resident_bytes,
        statics.forcing_bytes,
    )


def block_sizing_budget(memory_budget: int | None) -> int:
    """The budget a default block is sized against: `BLOCK_SIZING_BUDGET`, or a smaller
    `memory_budget` the user gave. Never the host's: a budget left to the host (None)
    sizes blocks like the fixed default, so every machine draws the same batches, and a
    budget raised above it does not change them.

    Args:
        memory_budget: the budget the user gave, or None when it is the host's.
    """
    if memory_budget is None:
        return BLOCK_SIZING_BUDGET
    return min(memory_budget, BLOCK_SIZING_BUDGET)


def loader_block_chunks(
    anchors: AnchorSet,
    layouts: Mapping[str, VariableLayout],
    block_chunks: int | None,
    block_budget: int,
) -> int:
    """`block_chunks` if given, else the default block (`default_block_chunks`) of the
    split's units, sized against `block_budget` (`block_sizing_budget`).

    Args:
        anchors: the samples of the split (their units and the rows a block holds).
        layouts: the selected arrays, by name.
        block_chunks: units per block, or None for the default.
        block_budget: the budget a default block is sized against.
    """
    if block_chunks is not None:
        return block_chunks
    return default_block_chunks(
        anchors.geometry.unit_length,
        anchors.block_rows_bound(1) * sample_nbytes(layouts),
        block_budget,
    )


def plan_loader_memory(
    memory_budget: int,
    anchors: AnchorSet,
    layouts: Mapping[str, VariableLayout],
    *,
    batch_size: int,
    block_chunks: int | None,
    max_inflight: int | None,
    batches_held: int,
) -> tuple[int, MemoryPlan]:
    """The block size (`block_chunks`, or by default `default_block_chunks` of the data's
    layout) and how `memory_budget` splits around it. The settings are checked here,
    where they are first used: the nodes they go to are built from this plan.

    Args:
        memory_budget: bytes the loader holds at most (an int >= 1).
        anchors: the samples of the split (their units and the rows a block holds).
        layouts: the selected arrays, by name.
        batch_size: samples per batch (an int >= 1).
        block_chunks: units per block (an int >= 1), or None for the default.
        max_inflight: chunk reads under way at once at most (an int >= 1), or None to
            follow the store.
        batches_held: gathered batches alive at once (see `plan_memory`).
    """
    batch_size = as_int("batch_size", batch_size, minimum=1)
    block_chunks = as_optional_int("block_chunks", block_chunks, minimum=1)
    max_inflight = as_optional_int("max_inflight", max_inflight, minimum=1)
    memory_budget = as_int("memory_budget", memory_budget, minimum=1)
    block_chunks = loader_block_chunks(
        anchors, layouts, block_chunks, block_sizing_budget(memory_budget)
    )
    plan = plan_memory(
        memory_budget,
        layouts,
        batch_size=batch_size,
        block_samples=anchors.block_rows_bound(block_chunks),
        max_inflight=max_inflight,
        batches_held=batches_held,
    )
    return block_chunks, plan


def least_budget(
    layouts: Mapping[str, VariableLayout],
    *,
    batch_size: int,
    block_samples: int,
    max_inflight: int | None,
    batches_held: int,
    window_samples: int | None = None,
    statics: StaticCost = NO_STATICS,
) -> int | None:
    """The least `memory_budget` that `plan_memory` accepts for a block of
    `block_samples` rows (one byte less is refused), or None when none up to
    `LARGEST_BUDGET` is. Found by bisection: with the block fixed, what is left for
    read-ahead only grows with the budget (reads in flight take at most an
    `INFLIGHT_SHARE` of each byte more), so fitting is monotone.

    Args:
        layouts: the selected arrays, by name.
        batch_size: samples per batch.
        block_samples: buffer rows of one block, at most.
        max_inflight: chunk reads under way at once at most, or None (see `plan_memory`).
        batches_held: gathered batches alive at once.
        window_samples: the shuffle window's rows (see `plan_memory`), or None.
        statics: what the static fields hold (see `plan_memory`).
    """

    def fits(budget: int) -> bool:
        try:
            plan_memory(
                budget,
                layouts,
                batch_size=batch_size,
                block_samples=block_samples,
                max_inflight=max_inflight,
                batches_held=batches_held,
                window_samples=window_samples,
                statics=statics,
            )
        except ValueError:
            return False
        return True

    return least_fitting(fits, above=0)


def least_fitting(fits: Callable[[int], bool], *, above: int) -> int | None:
    """The least budget above `above` for which `fits` holds and one byte less does not:
    doubling until one fits, then bisection. None when nothing up to `LARGEST_BUDGET`
    fits.

    Args:
        fits: whether a budget (bytes) is enough.
        above: a budget known not to fit (0 for none).
    """
    low, high = above, max(2 * above, 1)  # low never fits
    while not fits(high):
        if high >= LARGEST_BUDGET:
            return None
        low, high = high, 2 * high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if fits(middle) else (middle, high)
    return high
