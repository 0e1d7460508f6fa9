"""Block memory in chunk-sized slots: live blocks never share a slot, the gather reads
each block's rows through its slots, and slots go back (and are counted) block by block."""

from __future__ import annotations

import gc
import threading
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes import Loader, build_loader
from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.read_plan import ReadPlan, plan_block
from insitubatch_nodes.core.sample_spec import SampleSpec, window
from insitubatch_nodes.io.reads.block_slots import BlockMemory, BlockSlots, unit_segment_pairs
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.graph import graph_nodes
from tests.helpers.batches import batch_key
from tests.helpers.graphs import build_stage
from tests.helpers.profiles import examples
from tests.helpers.strategies import geometries


def _plans(geometry: SampleGeometry, block_units: int) -> list[ReadPlan]:
    units = np.arange(geometry.num_units)
    assignment = assign_epoch(geometry, units, seed=0, epoch=0, rank=0, world_size=1)
    units = assignment.units
    return [
        plan_block(geometry, units[i : i + block_units], assignment=assignment, block_index=j)
        for j, i in enumerate(range(0, units.size, block_units))
    ]


def _stamp(memory: BlockMemory, plan: ReadPlan, stamp: int) -> None:
    """Write each buffer row of every variable, segment by segment as a reader does:
    a value made of the block's stamp and the row."""
    for name, starts in memory.segment_starts.items():
        ends = [*starts[1:].tolist(), plan.buffer_rows[name]]
        for start, stop in zip(starts.tolist(), ends, strict=True):
            inner = memory.arrays[name].shape[1:]
            region = memory.region(name, (slice(start, stop), *(slice(0, n) for n in inner)))
            values = _expected(stamp, np.arange(start, stop))
            region[...] = values.reshape(-1, *[1] * len(inner))


def _expected(stamp: int, rows: np.ndarray) -> np.ndarray:
    return (stamp * 131 + rows) % 30_000  # exact in every dtype the strategies draw


def _check(memory: BlockMemory, plan: ReadPlan, stamp: int) -> None:
    for name in memory.segment_starts:
        table = plan.rows[name]
        taken = memory.arrays[name][memory.rows(name, table)]  # as the gather takes them
        want = _expected(stamp, table).reshape(*table.shape, *[1] * (taken.ndim - table.ndim))
        assert (taken == want).all(), f"block {stamp}: {name} was overwritten"


@settings(max_examples=examples(150), deadline=None)
@given(
    geometry=geometries(max_samples=60, picks=True),
    block_units=st.integers(1, 4),
    capacity_samples=st.integers(0, 80),
    steps=st.lists(st.tuples(st.booleans(), st.integers(0, 50)), min_size=1, max_size=40),
)
def test_live_blocks_never_share_slots_and_the_count_follows_them(
    geometry: SampleGeometry, block_units: int, capacity_samples: int, steps: list[Any]
) -> None:
    layouts = geometry.variables
    sample_bytes = sum(
        int(np.prod(layout.sample_shape)) * np.dtype(layout.dtype).itemsize
        for layout in layouts.values()
    )
    slots = BlockSlots(layouts, capacity_samples * sample_bytes)
    plans = _plans(geometry, block_units)
    live: list[tuple[BlockMemory, ReadPlan, int]] = []
    for stamp, (lease, index) in enumerate(steps):
        if lease or not live:
            live.append(_leased(slots, plans[index % len(plans)], stamp))
        else:
            live.pop(index % len(live))
        _check_all(live)  # (a function: a loop variable here would keep a dropped block)
        assert slots.leased_bytes == _leased_bytes(live, layouts)
    live.clear()
    gc.collect()
    assert slots.leased_bytes == 0


def _check_all(live: list[tuple[BlockMemory, ReadPlan, int]]) -> None:
    for memory, plan, stamp in live:
        _check(memory, plan, stamp)


def _leased(slots: BlockSlots, plan: ReadPlan, stamp: int) -> tuple[BlockMemory, ReadPlan, int]:
    memory = slots.lease(plan)
    _stamp(memory, plan, stamp)
    return memory, plan, stamp


def _leased_bytes(live: list[Any], layouts: Any) -> int:
    """Bytes of the slots the live blocks lease: a chunk's worth per segment."""
    return sum(
        int(memory.segment_starts[name].size)
        * layouts[name].sample_chunk
        * int(np.prod(layouts[name].sample_shape))
        * np.dtype(layouts[name].dtype).itemsize
        for memory, _, _ in live
        if memory.shifts is not None
        for name in memory.segment_starts
    )


def test_a_dropped_block_gives_its_slots_to_the_next_and_overflow_gets_its_own() -> None:
    layout = VariableLayout((40, 3), (2, 3), "float32")
    geometry = SampleGeometry.from_layouts({"v": layout})
    plans = _plans(geometry, 2)  # 2 units of 2 rows: 2 slots of 24 bytes per block
    slots = BlockSlots({"v": layout}, capacity_bytes=4 * 12)  # 4 samples: 2 + 2 spare slots
    first, second = slots.lease(plans[0]), slots.lease(plans[1])
    assert first.shifts is not None and second.shifts is not None
    assert slots.leased_bytes == 2 * 2 * 24 and slots.blocks_outside == 0
    third = slots.lease(plans[2])  # the four slots are taken
    assert third.shifts is None and slots.blocks_outside == 1
    assert third.arrays["v"].shape == (plans[2].buffer_rows["v"], 3)
    held_rows = set(first.rows("v", np.arange(4)).tolist())
    del first
    assert slots.leased_bytes == 2 * 24
    again = slots.lease(plans[3])
    assert again.shifts is not None
    assert set(again.rows("v", np.arange(4)).tolist()) == held_rows  # the lowest slots
    assert slots.peak_leased_bytes == 4 * 24


def test_batches_are_the_same_whether_blocks_lease_slots_or_not(memory_url: Any) -> None:
    """With slots for only a few chunks, some blocks lease and the others get their own
    buffers, and batches mix both: the gather reads each through its own rows."""
    url, _ = memory_url()
    roomy = [batch_key(b) for b in _epochs(build_stage(url, "gather", block_memory_bytes=1 << 30))]
    tight = build_stage(url, "gather", block_memory_bytes=0)
    assert [batch_key(b) for b in _epochs(tight)] == roomy
    slots = _fetch_node(tight).context.block_slots
    assert slots.blocks_outside > 0 and slots.peak_leased_bytes > 0  # both kinds happened


def _epochs(root: Any) -> list[Any]:
    loader = Loader(root)
    return [b for _ in range(2) for b in loader]


def _fetch_node(root: Any) -> AsyncFetchNode:
    return next(n for n in graph_nodes(root) if isinstance(n, AsyncFetchNode))


def test_a_loader_holds_its_blocks_in_slots_within_the_budget_and_frees_them(
    memory_url: Any,
) -> None:
    url, _ = memory_url()
    loader = build_loader(
        url, split="all", batch_size=4, block_chunks=2, device="cpu", shuffle="block"
    )
    slots = _fetch_node(loader.root).context.block_slots
    for batch in loader:
        assert slots.leased_bytes > 0  # the blocks being drawn from
        del batch
    gc.collect()
    assert slots.leased_bytes <= slots.peak_leased_bytes // 2  # the last block, kept for
    assert 0 < slots.peak_leased_bytes <= slots.capacity_bytes  # padding until the next epoch
    assert slots.blocks_outside == 0
    del loader
    gc.collect()
    assert slots.leased_bytes == 0


def test_a_released_unit_gives_back_only_the_slots_no_other_unit_needs() -> None:
    """A pool drains units one by one: a unit's slots go back once the block no longer
    holds its lease and nothing else does, except a halo chunk a unit still held needs."""
    layout = VariableLayout((40, 3), (2, 3), "float32")
    geometry = SampleGeometry.from_layouts({"v": layout})
    spec = SampleSpec({"x": window(["v"], steps=2)})  # t-1, t: a unit's halo is its neighbour
    anchors = AnchorSet.for_split(geometry, np.arange(geometry.num_units), spec)
    assignment = assign_epoch(anchors, anchors.units, seed=0, epoch=0, rank=0, world_size=1)
    units = np.sort(assignment.units)[2:5]  # three neighbouring units
    plan = plan_block(anchors, units, assignment=assignment, block_index=0)
    slots = BlockSlots({"v": layout}, capacity_bytes=40 * 12)
    memory = slots.lease(plan)
    _stamp(memory, plan, 1)
    slot_bytes = 2 * 12
    held = slots.leased_bytes
    assert held == 4 * slot_bytes  # the three units' chunks and the first one's halo
    kept = memory.unit_lease(0)  # e.g. a batch that drew unit 0's last samples
    memory.release_unit(0)
    assert slots.leased_bytes == held  # the batch still holds them
    del kept
    gc.collect()
    assert slots.leased_bytes == held - slot_bytes  # the halo: only unit 0 needed it
    memory.release_unit(2)
    assert slots.leased_bytes == held - 2 * slot_bytes  # unit 2's chunk; unit 1 needs its own
    _check(memory, plan, 1)  # what is still leased was not touched
    memory.release_unit(1)
    assert slots.leased_bytes == 0
    memory.release_unit(1)  # a second release is harmless


def test_a_block_collected_as_garbage_while_another_leases_gives_its_slots_back() -> None:
    """A block's memory caught in a reference cycle (an exception's traceback holds one)
    is freed by the garbage collector, which may run at any allocation: also inside
    `lease`, in the very thread holding the slots' lock. Giving the slots back there must
    not wait on that lock (it waited forever). Each collection threshold puts the
    collection at another allocation, one of them inside the lock."""
    layouts = {
        "a": VariableLayout((64, 2), (4, 2), "float32"),
        "b": VariableLayout((64,), (2,), "int16"),
    }
    plans = _plans(SampleGeometry.from_layouts(layouts), 2)
    slots = BlockSlots(layouts, 1 << 20)
    finished = threading.Event()

    def lease_while_collecting() -> None:
        for allocations in range(1, 120):
            cycle: list[Any] = [slots.lease(plans[allocations % len(plans)])]
            cycle.append(cycle)
            del cycle  # garbage now, freed by the next collection
            gc.set_threshold(gc.get_count()[0] + allocations)
            gc.enable()
            try:
                slots.lease(plans[(allocations + 1) % len(plans)])
            finally:
                gc.disable()
        finished.set()

    thresholds, enabled = gc.get_threshold(), gc.isenabled()
    gc.disable()
    try:
        worker = threading.Thread(target=lease_while_collecting, daemon=True)
        worker.start()
        worker.join(timeout=30)
        assert finished.is_set(), "a slot given back during lease() waited on lease's lock"
    finally:
        gc.set_threshold(*thresholds)
        if enabled:
            gc.enable()
    gc.collect()
    assert slots.leased_bytes == 0


@settings(max_examples=examples(100), deadline=None)
@given(
    geometry=geometries(max_samples=60, picks=True),
    block_units=st.integers(1, 4),
    steps=st.integers(1, 3),
)
def test_each_units_segments_are_the_distinct_pairs_of_its_rows(
    geometry: SampleGeometry, block_units: int, steps: int
) -> None:
    """`unit_segment_pairs` against the distinct (unit, segment) pairs of every row the
    plan reads, a window's halo included (`np.unique` of them, row by row)."""
    name = next(iter(geometry.variables))
    spec = SampleSpec({"x": window([name], steps=steps)})
    anchors = AnchorSet.for_split(geometry, np.arange(geometry.num_units), spec)
    if anchors.anchors.size == 0:
        return
    assignment = assign_epoch(anchors, anchors.units, seed=0, epoch=0, rank=0, world_size=1)
    units = assignment.units[:block_units]
    plan = plan_block(anchors, units, assignment=assignment, block_index=0)
    assert plan.unit_starts is not None
    want = set()
    for unit in range(units.size):
        rows = plan.rows[name][plan.unit_starts[unit] : plan.unit_starts[unit + 1]]
        for row in rows.reshape(-1).tolist():
            segment = int(np.searchsorted(plan.segment_starts[name], row, side="right")) - 1
            want.add((unit, segment))
    got_units, got_segments = unit_segment_pairs(plan, name)
    got = list(zip(got_units.tolist(), got_segments.tolist(), strict=True))
    assert got == sorted(want)


def test_a_block_of_no_units_leases_nothing() -> None:
    layouts = {"v": VariableLayout((10, 3), (2, 3), "float32")}
    geometry = SampleGeometry.from_layouts(layouts)
    assignment = assign_epoch(
        geometry, np.arange(geometry.num_units), seed=0, epoch=0, rank=0, world_size=1
    )
    plan = plan_block(geometry, np.zeros(0, np.int64), assignment=assignment, block_index=0)
    slots = BlockSlots(layouts, capacity_bytes=1000)
    memory = slots.lease(plan)
    assert memory.leases == {} and slots.leased_bytes == 0
