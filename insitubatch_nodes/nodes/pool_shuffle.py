"""PoolShuffleNode: draws batches from a pool of units (the chunk-pool shuffle).

It reproduces `core.pool_order.pool_epoch_order` incrementally: blocks arrive in the
rank's unit order; their units enter the pool at batch starts, as `enters_pool` says (up
to P of them, fewer while the pool ramps up, so that the first batch waits only for its
own units); each batch is `pool_take`'s draw over what each pool unit has left, each unit
giving its samples in its own seeded permutation, and the batch yields them in
`batch_interleave`'s order (carried as `BatchDraw.order`). The node waits for a unit that
is not read yet (read-ahead makes that rare), so the order never depends on IO timing. A
unit that has given its last sample leaves the pool and its block memory goes back unit by
unit (`BlockMemory.release_unit`), once the batch that drew its last samples is gathered
(`BatchDraw.holds`). A rank that pads keeps the last unit of its epoch for it.

State is small and plain, a cursor of O(P) ints (`nodes.pool_cursor`, which holds its
format and its checks): the source state from just before the oldest block still needed,
the position of the next unit to enter, the resident units as [position, given] pairs,
and how many samples the epoch has yielded. Resume reads from that block on, and only the
units still needed: the cursor says which units were drained, and the block planner the
node is linked to (the `ReadPlanNode` upstream) plans the blocks without them; the
resident units take up their counts. No array data is ever checkpointed.

Its peers are links (`nodes.links`), given to the constructor or linked by the `Loader`
the node is iterated through: the block planner it tells (without one, drained units are
read and dropped as they arrive) and the epoch keeper it counts its batches from.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.drained_units import DrainedUnits
from insitubatch_nodes.core.draw_order import padding_positions
from insitubatch_nodes.core.partition import EpochAssignment
from insitubatch_nodes.core.pool_order import (
    POOL_ORDER,
    POOL_ORDER_VERSION,
    POOL_ORDER_VERSION_GROUPED,
    POOL_RAMP,
    batch_interleave,
    enters_pool,
    pool_take,
    unit_draw,
)
from insitubatch_nodes.core.settings import as_bool, as_int
from insitubatch_nodes.nodes import pool_cursor, state_names
from insitubatch_nodes.nodes.items import BatchDraw, FetchedBlock
from insitubatch_nodes.nodes.links import BlockPlanner, EpochKeeper, checked_link
from insitubatch_nodes.nodes.pool_cursor import ResidentPairs, SavedPoolCursor, restore_cursor
from insitubatch_nodes.nodes.pool_units import PoolUnits
from insitubatch_nodes.nodes.shuffle_block import count_batches
from insitubatch_nodes.nodes.state_checks import (
    ORDER_KEY,
    ORDER_VERSION_KEY,
    SHUFFLE_SOURCE_KEY,
    SHUFFLE_TARGET_KEY,
    cursor_out_of_range,
)
from insitubatch_nodes.nodes.state_views import snapshot, state_reader


@dataclass
class _Unit:
    """A unit read and not yet drained: where its samples lie in its block, the order it
    gives them in, and how many it gave."""

    position: int
    block: FetchedBlock
    index: int  # in the block's plan units
    offset: int  # its first sample's row in the block's samples
    draw: np.ndarray
    given: int = 0

    @property
    def remaining(self) -> int:
        return self.draw.size - self.given

    def release(self) -> object:
        """Stop holding the unit's block memory from its block; the lease returned keeps
        it until whoever holds it lets go (None: nothing to hold)."""
        memory = self.block.memory
        if memory is None:
            return None
        lease = memory.unit_lease(self.index)
        memory.release_unit(self.index)
        return lease


@dataclass
class _Block:
    """A block pulled from the source: the positions of its units and the source state
    from just before it (where a resume that needs any of them starts)."""

    first: int
    stop: int
    source_state_before: dict[str, Any]


class PoolShuffleNode(BaseNode[BatchDraw]):
    """Batches of `batch_size` samples drawn from a pool of `pool_size` units (see the
    module and `core.pool_order`).

    Args:
        source: the fetched blocks (`AsyncFetchNode`), of a training loader.
        pool_size: P, the units the pool holds (`core.pool_order.pool_units`; an int >= 1).
        batch_size: samples per batch (an int >= 1).
        drop_last: yield only full batches, the same number on every rank (True or False).
        pool_ramp: how fast the pool fills, in batches' samples per batch (an int >= 0;
            `core.pool_order.enters_pool`): by default 2 (`POOL_RAMP`), so an epoch's first
            batch waits for two batches' samples, not P units; 0 fills the pool to P
            first, the order of version 1, whose states resume only with it (and
            `pool_interleave=False`).
        pool_interleave: yield each batch's samples permuted (True or False;
            `core.pool_order.batch_interleave`, order version 3), so that any contiguous
            slice of a batch (a micro-batch) is as mixed as the whole; False keeps them
            grouped by unit, the order of version 2, whose states resume only with it.
        epoch_keeper: the node that deals this rank's share upstream (the
            `ChunkPermuteNode`), which `batches_per_epoch` counts from; None: the `Loader`
            the node is iterated through links the one upstream.
        block_planner: the node upstream that plans blocks (the `ReadPlanNode`), told
            which units a restored state drained so that none of them is read; None: the
            `Loader` links the one upstream, if there is one.
    """

    STATE_NAME = state_names.POOL_SHUFFLE
    SOURCE_KEY = SHUFFLE_SOURCE_KEY
    NEXT_KEY = pool_cursor.NEXT_KEY
    RESIDENT_KEY = pool_cursor.RESIDENT_KEY
    YIELDED_KEY = pool_cursor.YIELDED_KEY
    TARGET_KEY = SHUFFLE_TARGET_KEY
    RAMP_KEY = pool_cursor.RAMP_KEY
    INTERLEAVE_KEY = pool_cursor.INTERLEAVE_KEY

    def __init__(
        self,
        source: BaseNode[FetchedBlock],
        *,
        pool_size: int,
        batch_size: int,
        drop_last: bool = False,
        pool_ramp: int = POOL_RAMP,
        pool_interleave: bool = True,
        epoch_keeper: EpochKeeper | None = None,
        block_planner: BlockPlanner | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self._read_source_state = state_reader(source)  # kept states: no copy per pull
        self.pool_size = as_int("pool_size", pool_size, minimum=1)
        self.batch_size = as_int("batch_size", batch_size, minimum=1)
        self.drop_last = as_bool("drop_last", drop_last)
        self.pool_ramp = as_int("pool_ramp", pool_ramp, minimum=0)
        self.pool_interleave = as_bool("pool_interleave", pool_interleave)
        self.order_version = (
            POOL_ORDER_VERSION if self.pool_interleave else POOL_ORDER_VERSION_GROUPED
        )
        self._epoch_keeper = checked_link(self, "epoch_keeper", epoch_keeper, EpochKeeper)
        self._block_planner = checked_link(self, "block_planner", block_planner, BlockPlanner)
        self._assignment: EpochAssignment | None = None
        self._positions: tuple[np.ndarray, np.ndarray] | None = None
        self._pool: PoolUnits[_Unit] = PoolUnits()  # in entry (position) order
        self._waiting: deque[_Unit] = deque()  # read, not entered yet
        self._last: _Unit | None = None  # the epoch's last unit, kept for padding
        self._blocks: deque[_Block] = deque()
        self._next = 0
        self._yielded = 0
        self._target: int | None = None
        self._restore_given: dict[int, int] = {}
        self._source_done = False
        self._source_state: dict[str, Any] = {}

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._pool, self._waiting, self._last = PoolUnits(), deque(), None
        self._blocks.clear()
        self._source_done = False
        self._assignment = self._positions = None
        if initial_state is None:
            self.source.reset(None)
            self._next, self._yielded, self._target = 0, 0, None
            self._restore_given = {}
        else:
            self._tell_planner(None)  # until this state's cursor is checked
            cursor = restore_cursor(
                self,
                initial_state,
                self._config(),
                order_version=self.order_version,
                pool_ramp=self.pool_ramp,
                pool_interleave=self.pool_interleave,
            )
            self._next, self._yielded = cursor.next_unit, cursor.samples_yielded
            self._target, self._restore_given = cursor.samples_target, dict(cursor.resident)
            self._tell_planner(cursor.drained_units())
        self._source_state = self.source.state_dict()

    def _tell_planner(self, drained: DrainedUnits | None) -> None:
        """Tell the block planner which units not to read; the source was reset and has
        read nothing yet (`AsyncFetchNode` starts reading at its first `next()`)."""
        if self._block_planner is not None:
            self._block_planner.leave_out_drained(drained)

    def _unit_positions(self, block: FetchedBlock) -> np.ndarray:
        """Where each unit of the block stands in the rank's unit order."""
        assignment = block.plan.assignment
        if self._assignment is not assignment:
            order = np.argsort(assignment.units, kind="stable")
            self._assignment, self._positions = assignment, (order, assignment.units[order])
        assert self._positions is not None
        order, ordered = self._positions
        return order[np.searchsorted(ordered, block.plan.units)]

    def _pull(self) -> bool:
        """Fetch the next block and sort its units: resident (restored), waiting to enter,
        the epoch's last (kept for padding), or drained already; False at the epoch's end."""
        before = self._read_source_state()
        try:
            block = next(self.source)
        except StopIteration:
            self._source_done = True
            return False
        a = block.plan.assignment
        if a.evaluation:
            raise ValueError(
                "the pool shuffle draws a training epoch, and this loader's share is an "
                "evaluation share (drawn in order): build it with shuffle='block', as "
                "build_loader(evaluation=True) does"
            )
        self._check_target(a)
        positions = self._unit_positions(block).tolist()
        starts = block.plan.unit_starts
        assert starts is not None
        self._blocks.append(_Block(positions[0], positions[-1] + 1, before))
        for index, position in enumerate(positions):
            size = int(starts[index + 1] - starts[index])
            draw = unit_draw(a.seed, a.epoch, int(block.plan.units[index]), size)
            given = 0 if a.starts is None else int(a.starts[position])  # a re-dealt rest
            unit = _Unit(position, block, index, int(starts[index]), draw, given)
            if position == a.units.size - 1 and self._pads(a):
                self._last = unit
            if position in self._restore_given:
                unit.given = self._restore_given.pop(position)
                if unit.given > size:
                    allowed = f"0 .. {size} (the samples of the unit it counts)"
                    raise cursor_out_of_range(self, self.RESIDENT_KEY, unit.given, allowed)
                self._pool.append(unit, position, unit.remaining, unit.given)
            elif position >= self._next:
                self._waiting.append(unit)
            elif unit is not self._last:  # drained before the cut, read without a planner
                unit.release()
        return True

    def _pads(self, a: EpochAssignment) -> bool:
        assert self._target is not None
        return self._target > a.rank_samples

    def _check_target(self, a: EpochAssignment) -> None:
        epoch_target = a.samples_per_rank(self.batch_size, self.drop_last)
        if self._target is not None and self._target != epoch_target:
            allowed = f"{epoch_target} .. {epoch_target} (the samples this rank's epoch yields)"
            raise cursor_out_of_range(self, self.TARGET_KEY, self._target, allowed)
        if self._target is None:
            if epoch_target == 0:
                raise ValueError(
                    f"batch_size={self.batch_size} with drop_last=True leaves no full batch: "
                    f"the smallest rank has {a.min_rank_samples} samples; lower batch_size or "
                    f"set drop_last=False"
                )
            self._target = epoch_target
        if self._next > a.units.size:
            allowed = f"0 .. {a.units.size} (the units of this rank's epoch)"
            raise cursor_out_of_range(self, self.NEXT_KEY, self._next, allowed)

    def _read_restored(self) -> None:
        """Read on until every resident unit of a restored state is back in the pool, and
        the epoch's last unit when the rank pads from it and it entered before the cut:
        no unit entering reads it then, and the batch that pads may need it before the
        pool runs dry."""
        while self._restore_given and not self._source_done and self._pull():
            pass
        if self._restore_given:
            missing = sorted(self._restore_given)[:5]
            allowed = "positions of units the source still yields"
            raise cursor_out_of_range(self, self.RESIDENT_KEY, missing, allowed)
        a = self._assignment
        assert a is not None
        if self._pads(a) and self._next == a.units.size:
            while self._last is None and not self._source_done and self._pull():
                pass

    def _enter_next(self) -> bool:
        """Move the next unit of the rank's order into the pool, reading its block if it
        is not here yet; False once every unit has entered."""
        while not self._waiting and not self._source_done and self._pull():
            pass
        if not self._waiting:
            return False
        unit = self._waiting.popleft()
        assert unit.position == self._next
        self._pool.append(unit, unit.position, unit.remaining, unit.given)
        self._next += 1
        return True

    def next(self) -> BatchDraw:
        if self._target is not None and self._yielded >= self._target:
            raise StopIteration  # an end-of-epoch state: nothing to read
        if self._assignment is None and not self._pull():
            raise StopIteration
        assert self._target is not None and self._assignment is not None
        a = self._assignment
        want = min(self.batch_size, self._target - self._yielded)
        if want <= 0:
            raise StopIteration
        real = min(want, a.rank_samples - min(self._yielded, a.rank_samples))
        self._read_restored()
        batch = self._yielded // self.batch_size
        while self._enters(self._pool.samples, real, batch) and self._enter_next():
            pass
        counts = pool_take(a.seed, a.epoch, a.rank, batch, self._pool.left(), real)
        parts: list[tuple[FetchedBlock, list[np.ndarray]]] = []
        holds: list[object] = []
        for unit, count, drained in self._pool.give(counts):
            rows = unit.offset + unit.draw[unit.given : unit.given + count]
            unit.given += count
            if parts and parts[-1][0] is unit.block:  # a block's units are neighbours
                parts[-1][1].append(rows)
            else:
                parts.append((unit.block, [rows]))
            if drained and unit is not self._last:
                holds.append(unit.release())
        if want > real:
            parts.append(self._pad(want - real, self._yielded + real - a.rank_samples))
        self._yielded += want
        self._forget_blocks()
        order = None
        if self.pool_interleave:
            order = batch_interleave(a.seed, a.epoch, a.rank, batch, want, real)
        return BatchDraw(
            tuple((block, np.concatenate(rows)) for block, rows in parts), tuple(holds), order
        )

    def _enters(self, in_pool: int, real: int, batch: int) -> bool:
        return enters_pool(
            len(self._pool),
            in_pool,
            real,
            batch,
            pool_size=self.pool_size,
            ramp=self.pool_ramp,
            batch_size=self.batch_size,
        )

    def _pad(self, count: int, already: int) -> tuple[FetchedBlock, list[np.ndarray]]:
        """Repeat the last unit's draw, cycled (see `core.pool_order`)."""
        last = self._last
        assert last is not None, "padding needs the epoch's last unit"
        positions = padding_positions(last.draw.size, already + count, last.draw)[already:]
        return last.block, [last.offset + positions]

    def _forget_blocks(self) -> None:
        """Drop the blocks no unit still needed lies in, oldest first; the oldest kept
        says where a resume starts reading."""
        oldest_resident = self._pool.oldest_position()
        needed = [] if oldest_resident is None else [oldest_resident]
        if self._waiting:
            needed.append(self._waiting[0].position)
        if self._last is not None and self._yielded < (self._target or 0):
            needed.append(self._last.position)
        oldest = min(needed, default=None)
        while self._blocks and (oldest is None or self._blocks[0].stop <= oldest):
            self._blocks.popleft()

    def _config(self) -> dict[str, Any]:
        return {
            "batch_size": self.batch_size,
            "drop_last": self.drop_last,
            "pool_size": self.pool_size,
            self.RAMP_KEY: self.pool_ramp,
            self.INTERLEAVE_KEY: self.pool_interleave,
            ORDER_KEY: POOL_ORDER,
            ORDER_VERSION_KEY: self.order_version,
        }

    @property
    def epoch_keeper(self) -> EpochKeeper | None:
        """The node this one counts its batches from (`nodes.links.NeedsEpochKeeper`)."""
        return self._epoch_keeper

    def link_epoch_keeper(self, keeper: EpochKeeper) -> None:
        """Count batches from `keeper`: what a `Loader` calls, once, when it is built over
        a graph whose shuffle node was given none.

        Args:
            keeper: the epoch keeper upstream.
        """
        self._epoch_keeper = checked_link(self, "epoch_keeper", keeper, EpochKeeper)

    @property
    def block_planner(self) -> BlockPlanner | None:
        """The planner a restored state's drained units are told to
        (`nodes.links.NeedsBlockPlanner`)."""
        return self._block_planner

    def link_block_planner(self, planner: BlockPlanner) -> None:
        """Tell `planner` which units a restored state drained: what a `Loader` calls,
        once, when it is built over a graph whose pool shuffle was given none.

        Args:
            planner: the block planner upstream.
        """
        self._block_planner = checked_link(self, "block_planner", planner, BlockPlanner)

    def batches_per_epoch(self) -> int:
        """Batches this node yields per epoch on this rank (the last one may be short),
        computed from the share its epoch keeper deals, without reading anything.

        Raises:
            TypeError: no epoch keeper is linked (see `epoch_keeper`).
        """
        return count_batches(self, self._epoch_keeper, self.batch_size, self.drop_last)

    def get_state(self) -> dict[str, Any]:
        return snapshot(self.state_view())  # the resident pairs made plain by the copy

    def state_view(self) -> dict[str, Any]:
        """The state without a copy, for a node downstream to keep unchanged
        (`nodes.state_views`)."""
        if self._blocks:
            source_state = self._blocks[0].source_state_before
        elif self._target is None:
            source_state = self._source_state  # nothing pulled since the reset
        else:
            source_state = self._read_source_state()
        positions, given = self._pool.resident()
        resident = ResidentPairs(positions, given, sorted(self._restore_given.items()))
        cursor = SavedPoolCursor(self._next, resident, self._yielded, self._target)
        return cursor.saved(self, source_state, self._config())
