"""Block memory in chunk-sized slots, leased by the fetch node and freed slot by slot.

A block used to be one buffer per variable: counted in the budget only until it was handed
out, and freed only whole. A shuffle that holds units from many blocks (a pool) must free
memory unit by unit and count what it holds. So each variable has one backing array cut
into slots of one sample-axis chunk (the variable's `sample_chunk` rows), and a block
leases one slot per *segment* of its plan (`ReadPlan.segment_starts`: the rows of one
sample-axis chunk it reads). A unit is whole chunks of every variable, hence whole slots:
whatever holds a unit's segments can give them back on their own. On a grid the chunks
do not align with (`core.unit_grid`), a segment is one piece (a chunk's rows inside one
unit cell) and a slot holds the longest piece, `unit_grid.slot_rows`.

A block's rows are then scattered over the backing array. `BlockMemory.rows` translates
the plan's buffer rows into backing rows with one vectorised search (the gather does it
once per block), and since blocks share the backing array, the gather takes a batch's
rows of one field from tens of blocks in one take; decoding shifts each chunk's target
rows once (`BlockMemory.region`), which is Python work per chunk, not per sample.

Each unit's slots (the slots its samples' rows lie in, a window's halo included) are
held by one small lease object whose deletion gives them back; a slot two units need is
in both leases and counts its holders, so it goes back with the last of them. The
block's `BlockMemory` holds the leases by unit. By default the leases go with the block
(when the shuffle and the gather are done with it: the batches the gather writes are
copies, so nothing else views a slot). A pool shuffle, which drains units one by one,
takes a unit's lease (`unit_lease`), drops it from the block (`release_unit`) once the
unit has given its last sample, and lets the batch that drew those samples hold the
lease until it is gathered: a unit's slots then go back while the block's other units
are still drawn from. The lowest free slots are leased first, so the pages in use stay
the same few (a page's first write costs a fault, about a sixth of the loader's
throughput on two cores with one time step per chunk), and the backing arrays are
allocated unwritten, so slots never leased cost no memory. When the free slots cannot
hold a block (more blocks alive than the budget planned), it gets memory of its own and
`blocks_outside` counts it.
"""

from __future__ import annotations

import bisect
import heapq
import math
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.read_plan import ReadPlan
from insitubatch_nodes.core.unit_grid import slot_rows

SPARE_SLOTS = 2  # per variable beyond the capacity's share: ragged last chunks round up


@dataclass(frozen=True, eq=False)
class BlockMemory:
    """Where one block's rows live: per variable an array, and how far each segment of
    the plan's buffer is moved in it.

    Args:
        arrays: per variable, the array holding the block's rows (a pool's backing array,
            or the block's own buffer).
        segment_starts: per variable, each segment's first row in the plan's buffer
            (`ReadPlan.segment_starts`).
        shifts: per variable, each segment's first row in `arrays[variable]` minus its
            first row in the plan's buffer; None when the block has its own buffers, laid
            out as the plan's.
        leases: what keeps the block's slots leased, by unit (its index in the plan's
            units; -1 for slots no unit's samples lie in); empty for own buffers.
    """

    arrays: Mapping[str, np.ndarray]
    segment_starts: Mapping[str, np.ndarray]
    shifts: Mapping[str, np.ndarray] | None = None
    leases: dict[int, object] = field(default_factory=dict)
    _placing: dict[str, tuple[list[int], list[int]]] = field(
        default_factory=dict, init=False, repr=False
    )

    def unit_lease(self, unit: int) -> object:
        """What keeps unit `unit`'s slots leased (None for own buffers or once released):
        whoever holds it keeps those slots from being leased again.

        Args:
            unit: the unit's index in the plan's units.
        """
        return self.leases.get(unit)

    def release_unit(self, unit: int) -> None:
        """Stop holding unit `unit`'s slots from this block: they go back once nothing
        else holds the unit's lease (and no other unit of the block needs them). Safe to
        call more than once.

        Args:
            unit: the unit's index in the plan's units.
        """
        self.leases.pop(unit, None)

    @classmethod
    def own(cls, plan: ReadPlan, layouts: Mapping[str, VariableLayout]) -> BlockMemory:
        """Fresh buffers laid out as the plan's, for every variable the plan reads.

        Args:
            plan: the block's read plan.
            layouts: the variables' layouts, by name.
        """
        arrays = {
            name: np.empty(
                (plan.buffer_rows[name], *layouts[name].sample_shape),
                dtype=np.dtype(layouts[name].dtype),
            )
            for name in plan.reads
        }
        return cls(arrays, {name: plan.segment_starts[name] for name in plan.reads})

    def rows(self, name: str, buffer_rows: np.ndarray) -> np.ndarray:
        """The rows of `arrays[name]` holding the plan's buffer rows `buffer_rows` (any
        shape), in one vectorised search.

        Args:
            name: the variable.
            buffer_rows: rows of the plan's buffer (`ReadPlan.rows`).
        """
        if self.shifts is None:
            return buffer_rows
        segment = np.searchsorted(self.segment_starts[name], buffer_rows, side="right") - 1
        return buffer_rows + self.shifts[name][segment]

    def region(self, name: str, target: tuple[slice, ...]) -> np.ndarray:
        """The view of `arrays[name]` where `target` (a region of the plan's buffer within
        one segment, `read_plan.chunk_regions`) lives.

        A decode thread asks this for every chunk: the segment is found by `bisect` in
        the variable's starts and shifts as Python lists (made once per block and variable,
        by the first decode thread to ask), a fraction of a numpy search on one value.

        Args:
            name: the variable.
            target: the region, its first slice in the plan's buffer rows.
        """
        array = self.arrays[name]
        if self.shifts is None:
            return array[target]
        placing = self._placing.get(name)
        if placing is None:  # threads racing here make the same lists
            placing = (self.segment_starts[name].tolist(), self.shifts[name].tolist())
            self._placing[name] = placing
        starts, shifts = placing
        rows = target[0]
        shift = shifts[bisect.bisect_right(starts, rows.start) - 1]
        return array[(slice(rows.start + shift, rows.stop + shift), *target[1:])]


class _UnitLease:
    """One unit's slots, given back when the lease is dropped (`__del__`): each slot
    whose last holder this was goes back (see the module).

    One object per unit, holding its slots as one tuple of ints (which the garbage
    collector stops tracking): a token per slot was one tracked object per chunk at one
    time step per chunk, and kept alive while a pool holds its unit, most of them reached
    the oldest generation and brought full collections around sooner (issue 33).

    Args:
        owner: the slots' `BlockSlots`.
        backings: the backings the slots were taken from (one generation's).
        slots: the slots, each as `variable * stride + slot` (`BlockSlots._stride`).
    """

    __slots__ = ("_backings", "_owner", "_slots")

    def __init__(self, owner: BlockSlots, backings: list[_Backing], slots: tuple[int, ...]) -> None:
        self._owner = owner
        self._backings = backings
        self._slots = slots

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        if not _finalizing():  # at interpreter exit there is nothing left to give back to
            self._owner._give_back(self._backings, self._slots)


def unit_segment_pairs(plan: ReadPlan, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Which segments of variable `name` each unit's samples read (its own chunks and any
    halo chunk): distinct (unit, segment) pairs as two arrays, the unit an index into the
    plan's units and the segment an index into `plan.segment_starts[name]`. One
    vectorised pass over the plan's rows.

    Args:
        plan: the block's read plan (with `unit_starts`).
        name: the variable.
    """
    assert plan.unit_starts is not None
    table = plan.rows[name]
    sizes = np.diff(plan.unit_starts)
    unit_of_row = np.repeat(np.repeat(np.arange(sizes.size), sizes), table.shape[1])
    segment = np.searchsorted(plan.segment_starts[name], table.reshape(-1), side="right") - 1
    count = plan.segment_starts[name].size
    pairs = np.sort(unit_of_row * count + segment)
    if pairs.size:  # distinct, as np.unique gives them (which costs 3x more on a block)
        pairs = pairs[np.concatenate(([True], pairs[1:] != pairs[:-1]))]
    return pairs // count, pairs % count


def _unit_slots(
    plan: ReadPlan, taken: Mapping[str, list[int]], variables: Mapping[str, int], stride: int
) -> dict[int, tuple[int, ...]]:
    """Each unit's slots (see the module) as `variable * stride + slot`, by unit; slots no
    unit needs (none, for plans `core.read_plan` makes) under -1. Grouped by one sort."""
    units: list[np.ndarray] = []
    slots: list[np.ndarray] = []
    for name, segment_slots in taken.items():
        global_slots = np.asarray(segment_slots, dtype=np.int64) + variables[name] * stride
        if plan.unit_starts is None:
            units.append(np.full(global_slots.size, -1, dtype=np.int64))
            slots.append(global_slots)
            continue
        unit, segment = unit_segment_pairs(plan, name)
        unused = np.ones(global_slots.size, dtype=bool)
        unused[segment] = False
        units += [unit, np.full(int(unused.sum()), -1, dtype=np.int64)]
        slots += [global_slots[segment], global_slots[unused]]
    unit_of = np.concatenate(units) if units else np.zeros(0, dtype=np.int64)
    if not unit_of.size:  # a plan that reads nothing
        return {}
    order = np.argsort(unit_of, kind="stable")
    ordered_units, ordered_slots = unit_of[order], np.concatenate(slots)[order].tolist()
    bounds = np.flatnonzero(np.r_[True, ordered_units[1:] != ordered_units[:-1], True])
    firsts = bounds[:-1].tolist()
    return {
        unit: tuple(ordered_slots[a:b])
        for unit, a, b in zip(
            ordered_units[firsts].tolist(), firsts, bounds[1:].tolist(), strict=True
        )
    }


class _Backing:
    """One variable's slots: a backing array (allocated at the first lease), the slots
    given back (a heap, lowest first) and the first slot never leased."""

    def __init__(self, layout: VariableLayout, slots: int, rows: int) -> None:
        self.slots = slots
        self.slot_rows = rows
        self.shape = (slots * self.slot_rows, *layout.sample_shape)
        self.dtype = np.dtype(layout.dtype)
        self.slot_nbytes = self.slot_rows * math.prod(layout.sample_shape) * self.dtype.itemsize
        self.array: np.ndarray | None = None
        self.given_back: list[int] = []
        self.unused_from = 0
        self.holders = [0] * slots  # the unit leases holding each slot

    @property
    def free(self) -> int:
        return len(self.given_back) + self.slots - self.unused_from

    def take(self, count: int) -> list[int]:
        """`count` free slots, the lowest first (the caller checked that they exist)."""
        taken = [heapq.heappop(self.given_back) for _ in range(min(count, len(self.given_back)))]
        fresh = count - len(taken)
        taken += range(self.unused_from, self.unused_from + fresh)
        self.unused_from += fresh
        return taken

    def array_once(self) -> np.ndarray:
        if self.array is None:
            self.array = np.empty(self.shape, dtype=self.dtype)
        return self.array


class BlockSlots:
    """Chunk-sized slots of every variable for blocks to lease (see the module).

    Thread-safe: the fetch node leases in the caller's thread, and slots go back in
    whichever thread drops a block's memory last.

    Args:
        layouts: the variables' layouts, by name.
        capacity_bytes: memory of blocks alive at once, at most (the shuffle window and
            the read-ahead of `core.memory_bound.plan_memory`); each variable gets slots
            for that many samples, and a block its slots allow.
        unit_length: steps per unit when units may be shorter than chunks (a fine grid,
            revisits): a slot then holds `core.unit_grid.slot_rows` rows, the longest
            piece a plan reads; None for one chunk's rows.
    """

    def __init__(
        self,
        layouts: Mapping[str, VariableLayout],
        capacity_bytes: int,
        unit_length: int | None = None,
    ) -> None:
        self._layouts = dict(layouts)
        self._unit_length = unit_length
        self.capacity_bytes = capacity_bytes
        sample_bytes = sum(
            math.prod(layout.sample_shape) * np.dtype(layout.dtype).itemsize
            for layout in self._layouts.values()
        )
        self._samples = capacity_bytes // max(1, sample_bytes)
        # Re-entrant: a lease is given back wherever the garbage collector frees it, which
        # may be at an allocation inside this lock, in the thread holding it (a block's
        # memory in a reference cycle). Nothing here lets that in halfway through a change:
        # every allocation under the lock comes between whole updates.
        self._lock = threading.RLock()
        self._variables = {name: i for i, name in enumerate(self._layouts)}
        self._backings = self._fresh()
        self._held = list(self._backings.values())  # by variable index, as leases hold them
        self._stride = max((b.slots for b in self._held), default=1)
        self.leased_bytes = 0
        self.peak_leased_bytes = 0
        self.blocks_outside = 0  # blocks the free slots could not hold

    def _fresh(self) -> dict[str, _Backing]:
        """Slots for the capacity's samples, and never more than twice the chunks along
        the sample axis (a chunk is alive at most once per epoch, plus once more as a
        window's halo or in the next epoch's read-ahead; any block beyond that gets
        memory of its own), so a small array does not reserve the whole budget."""
        backings = {}
        for name, layout in self._layouts.items():
            rows = layout.sample_chunk
            pieces = -(-layout.shape[0] // rows)
            if self._unit_length is not None and self._unit_length % rows:
                rows = slot_rows(rows, self._unit_length)
                pieces += -(-layout.shape[0] // self._unit_length)  # cut at unit cells too
            wanted = -(-self._samples // rows) + SPARE_SLOTS
            backings[name] = _Backing(layout, min(wanted, 2 * pieces + SPARE_SLOTS), rows)
        return backings

    def lease(self, plan: ReadPlan) -> BlockMemory:
        """Memory for the block of `plan`: leased slots, or (when the free slots cannot
        hold it) buffers of its own.

        Args:
            plan: the block's read plan.
        """
        wanted = {name: int(plan.segment_starts[name].size) for name in plan.reads}
        for name in plan.reads:
            if not plan.segment_starts[name].size:
                continue
            longest = int(np.diff(plan.segment_starts[name], append=plan.buffer_rows[name]).max())
            if longest > self._backings[name].slot_rows:
                raise ValueError(
                    f"a block of {name!r} has a segment of {longest} rows, longer than its "
                    f"{self._backings[name].slot_rows}-row slots: the plan's unit grid is not "
                    f"the one these slots were made for (ReadContext.create(unit_length=...))"
                )
        with self._lock:
            backings = self._backings
            if any(backings[name].free < count for name, count in wanted.items()):
                self.blocks_outside += 1
                return BlockMemory.own(plan, self._layouts)
            taken = {name: backings[name].take(count) for name, count in wanted.items()}
            nbytes = sum(len(taken[n]) * backings[n].slot_nbytes for n in taken)
            self.leased_bytes += nbytes
            self.peak_leased_bytes = max(self.peak_leased_bytes, self.leased_bytes)
            arrays = {name: backings[name].array_once() for name in taken}
            held = self._held
        shifts = {
            name: np.asarray(slots, dtype=np.int64) * backings[name].slot_rows
            - plan.segment_starts[name]
            for name, slots in taken.items()
        }
        by_unit = _unit_slots(plan, taken, self._variables, self._stride)
        stride = self._stride
        for slots in by_unit.values():  # no other thread holds these slots yet
            for slot in slots:
                held[slot // stride].holders[slot % stride] += 1
        return BlockMemory(
            arrays,
            {name: plan.segment_starts[name] for name in taken},
            shifts,
            {unit: _UnitLease(self, held, slots) for unit, slots in by_unit.items()},
        )

    @property
    def allocated_bytes(self) -> int:
        """Bytes of the backing arrays allocated now (kept between epochs, let go by
        `clear`); pages never written are allocated but cost no memory."""
        with self._lock:
            return sum(b.array.nbytes for b in self._backings.values() if b.array is not None)

    def _give_back(self, backings: list[_Backing], slots: tuple[int, ...]) -> None:
        """A unit lease's slots lose a holder; those left with none go back (to the free
        slots if `backings` are still the current ones: after `clear` they go with
        their arrays)."""
        stride = self._stride
        with self._lock:
            current = backings is self._held
            for held in slots:
                backing, slot = backings[held // stride], held % stride
                backing.holders[slot] -= 1
                if backing.holders[slot] == 0:
                    self.leased_bytes -= backing.slot_nbytes
                    if current:
                        heapq.heappush(backing.given_back, slot)

    def clear(self) -> None:
        """Let the backing arrays go (they are freed once the blocks still leasing them
        are); the next lease starts new ones. The fetch node calls it on `close()`, not at
        an epoch's end: the next epoch reuses the pages already faulted in."""
        with self._lock:
            self._backings = self._fresh()
            self._held = list(self._backings.values())
