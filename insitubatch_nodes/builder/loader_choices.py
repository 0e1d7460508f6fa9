"""What `build_loader` chooses for the settings a user leaves out, and why.

Two kinds of defaults, kept apart:

- Settings that change the batches (the block size: samples are shuffled within blocks;
  the pool shuffle's pool size, from `shuffle_window`) are a pure function of the
  settings and the store, never of the host, so two machines give the same batches and a
  run resumes on another machine. A default block is sized against a fixed 1 GiB, or a
  smaller budget the user gave (`core.memory_bound.block_sizing_budget`), and so is the
  default window (`core.memory_bound.shuffle_window_bytes`); the block size and the pool
  size are kept in the loader's state (`ReadPlanNode`'s and `PoolShuffleNode`'s config),
  so a state saved under others is refused by name.
- Settings that only change how fast and within how much memory the same batches come
  (the memory budget, the decode threads) follow the host (`HostResources`): each rank
  takes its share of the available memory and of the cores.

A budget from the host that the settings do not fit in is raised to the least that fits
while this rank's part of the available memory holds it; beyond that the loader is
refused, with the numbers (`builder.host_too_small`). The plan of a loader
(`builder.loader_plan`) takes its choices from here, and `insitubatch inspect`
(`cli.defaults_report`) reports the same choices from the same function, with a budget
that fits when they are refused (`builder.fitting_budget`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from insitubatch_nodes.builder.host_too_small import host_too_small
from insitubatch_nodes.builder.loader_settings import DEFAULT_SHUFFLE, check_shuffle
from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.memory_bound import (
    BLOCKS_PER_BUDGET,
    MIN_BLOCK_CHUNKS,
    MIN_BLOCK_SAMPLES,
    NO_STATICS,
    MemoryPlan,
    StaticCost,
    block_sizing_budget,
    least_budget,
    loader_block_chunks,
    plan_memory,
    pool_window_samples,
    shuffle_window_bytes,
    unit_nbytes,
)
from insitubatch_nodes.core.pool_order import pool_units
from insitubatch_nodes.core.settings import as_int, as_optional_int
from insitubatch_nodes.io.host.host_resources import HostResources

GIVEN = "given"


@dataclass(frozen=True)
class LoaderChoices:
    """The settings a loader runs with, and where each came from.

    Args:
        memory_budget: bytes the loader holds at most.
        memory_from: why that budget ("given", or how the host's share makes it).
        decode_threads: threads of the decode pool.
        threads_from: why that many.
        block_chunks: units per block.
        block_from: why that many.
        plan: how the budget splits (`core.memory_bound.MemoryPlan`).
        shuffle: the order (`"pool"` or `"block"`).
        pool_size: the pool's units (P) for the pool shuffle, else None.
        pool_from: why that many.
    """

    memory_budget: int
    memory_from: str
    decode_threads: int
    threads_from: str
    block_chunks: int
    block_from: str
    plan: MemoryPlan
    shuffle: str = "block"
    pool_size: int | None = None
    pool_from: str = ""

    def summary(self) -> str:
        """One line for the log: each choice with its reason, and how the budget splits."""
        plan = self.plan
        return (
            f"memory_budget={self.memory_budget} ({self.memory_from}): shuffle window "
            f"{plan.window_bytes}, batches {plan.batch_bytes}, reads in flight up to "
            f"{plan.inflight_bytes}, read-ahead up to {plan.read_ahead_bytes}"
            + (
                f", cache writes queued up to {plan.cache_queue_bytes}"
                if plan.cache_queue_bytes
                else ""
            )
            + " bytes; "
            f"decode_threads={self.decode_threads} ({self.threads_from}); "
            f"block_chunks={self.block_chunks} ({self.block_from}); shuffle={self.shuffle}"
            + (
                ""
                if self.pool_size is None
                else f", pool of {self.pool_size} units ({self.pool_from})"
            )
        )


def _block_reason(block_chunks: int | None, sized_against: int) -> str:
    if block_chunks is not None:
        return GIVEN
    return (
        f"at least {MIN_BLOCK_SAMPLES} samples and {MIN_BLOCK_CHUNKS} chunks, a block within "
        f"1/{BLOCKS_PER_BUDGET} of {sized_against} bytes: never the host's memory, so every "
        f"machine draws the same batches"
    )


def choose_loader_settings(
    anchors: AnchorSet,
    layouts: Mapping[str, VariableLayout],
    host: HostResources,
    *,
    batch_size: int,
    block_chunks: int | None,
    max_inflight: int | None,
    memory_budget: int | None,
    decode_threads: int | None,
    batches_held: int,
    shuffle: str = DEFAULT_SHUFFLE,
    shuffle_window: int | None = None,
    world_size: int = 1,
    cache_writes: bool = False,
    unit_cost: str = "",
    statics: StaticCost = NO_STATICS,
) -> LoaderChoices:
    """The budget, decode threads, block size and memory plan of a loader: the user's
    settings where given, else the defaults (see the module).

    Args:
        anchors: the samples of the split.
        layouts: the selected arrays, by name.
        host: the host's memory, cores and ranks (`HostResources.read()`).
        batch_size: samples per batch (an int >= 1).
        block_chunks: units per block (an int >= 1), or None for the default.
        max_inflight: chunk reads under way at once at most (an int >= 1), or None to
            follow the store.
        memory_budget: bytes the loader holds at most (an int >= 1), or None for the
            host's share.
        decode_threads: threads of the decode pool (an int >= 1), or None for the host's
            share of the cores.
        batches_held: gathered batches alive at once (the staging ring on CUDA).
        shuffle: `"pool"` or `"block"` (`check_shuffle`).
        shuffle_window: bytes the pool shuffle's units may hold (an int >= 1), or None
            for the default (`core.memory_bound.shuffle_window_bytes`); it sets P.
        world_size: the ranks sharing the split (a rank's pool never holds more units
            than its share).
        cache_writes: whether a chunk cache is written (its queue's share of the
            read-ahead, `core.memory_bound.plan_memory`; never a block's or the pool's).
        unit_cost: why the units are as large as they are and what costs less memory
            (`StrideUnits.memory_hint`), added to a budget refusal; empty for none.
        statics: what the static fields hold (`core.memory_bound.StaticCost`).

    Raises:
        ValueError: a setting is out of range, or a given budget is too small for the
            settings (the plan's refusal, with its numbers).
        HostTooSmallError: the settings need more than this rank's part of the host's
            available memory.
    """
    batch_size = as_int("batch_size", batch_size, minimum=1)
    block_chunks = as_optional_int("block_chunks", block_chunks, minimum=1)
    max_inflight = as_optional_int("max_inflight", max_inflight, minimum=1)
    memory_budget = as_optional_int("memory_budget", memory_budget, minimum=1)
    decode_threads = as_optional_int("decode_threads", decode_threads, minimum=1)
    sized_against = block_sizing_budget(memory_budget)
    chunks = loader_block_chunks(anchors, layouts, block_chunks, sized_against)
    block_samples = anchors.block_rows_bound(chunks)
    pool_size, pool_from, window_samples = None, "", None
    rank_units = -(-int(anchors.units.size) // max(1, world_size))

    def plan_for(budget: int, pool: int | None = None) -> MemoryPlan:
        pool = pool_size if pool is None else pool
        try:
            return plan_memory(
                budget,
                layouts,
                batch_size=batch_size,
                block_samples=block_samples,
                max_inflight=max_inflight,
                batches_held=batches_held,
                window_samples=None
                if pool is None
                else pool_window_samples(anchors, pool, rank_units, block_samples, batch_size),
                cache_writes=cache_writes,
                statics=statics,
            )
        except ValueError as refused:
            if not unit_cost:
                raise
            raise ValueError(f"{refused} ({unit_cost})") from None

    if check_shuffle(shuffle) == "pool":
        window = shuffle_window_bytes(shuffle_window, memory_budget)
        unit_bytes = unit_nbytes(anchors, layouts)
        pool_size = pool_units(window, unit_bytes, anchors.unit_length, batch_size)
        pool_from = (
            f"shuffle_window={window} bytes{' (given)' if shuffle_window is not None else ''}"
            f" over {unit_bytes}-byte units, at least a batch's units plus one: never the "
            f"host's memory"
        )
        if shuffle_window is None and memory_budget is not None:
            fitted = _pool_within(
                memory_budget,
                pool_units(1, 1, anchors.unit_length, batch_size),
                pool_size,
                plan_for,
            )
            if fitted < pool_size:
                pool_size = fitted
                pool_from = (
                    f"the most units that memory_budget={memory_budget} bytes (given) holds "
                    f"beside the batches, reads in flight and one block read ahead, below "
                    f"the default window: never the host's memory"
                )
        window_samples = pool_window_samples(
            anchors, pool_size, rank_units, block_samples, batch_size
        )

    if memory_budget is not None:
        budget, memory_from, plan = memory_budget, GIVEN, plan_for(memory_budget)
    else:
        budget, memory_from = host.memory_budget(), host.memory_text()
        try:
            plan = plan_for(budget)
        except ValueError as refused:
            least = least_budget(
                layouts,
                batch_size=batch_size,
                block_samples=block_samples,
                max_inflight=max_inflight,
                batches_held=batches_held,
                window_samples=window_samples,
                statics=statics,
            )
            if least is None or least > host.rank_memory_bytes:
                keep = None if block_chunks is not None else chunks
                named = None if shuffle_window is not None or pool_size is None else window
                raise host_too_small(host, least, keep, refused, named) from None
            budget, plan = least, plan_for(least)
            memory_from = (
                f"raised to the least these settings fit in, above {memory_from}; within "
                f"this rank's {host.rank_memory_bytes} bytes"
            )
    return LoaderChoices(
        memory_budget=budget,
        memory_from=memory_from,
        decode_threads=host.decode_threads() if decode_threads is None else decode_threads,
        threads_from=host.threads_text() if decode_threads is None else GIVEN,
        block_chunks=chunks,
        block_from=_block_reason(block_chunks, sized_against),
        plan=plan,
        shuffle=shuffle,
        pool_size=pool_size,
        pool_from=pool_from,
    )


def _pool_within(
    budget: int, least: int, most: int, plan_for: Callable[[int, int], MemoryPlan]
) -> int:
    """The largest pool size in `least .. most` whose plan fits `budget` (the plan's
    needs grow with the pool), or `most` when none does, so that the plan's refusal names
    the default's numbers. A pure function of the settings: the budget is the user's."""

    def fits(pool: int) -> bool:
        try:
            plan_for(budget, pool)
        except ValueError:
            return False
        return True

    if fits(most) or not fits(least):
        return most
    low, high = least, most  # low fits, high does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low
