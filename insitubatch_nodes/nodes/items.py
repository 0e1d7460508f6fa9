"""What flows between the nodes. Items carry references to shared, immutable plan objects;
only `FetchedBlock` and `Batch` carry array data, and no node state ever does.

Where an item's arrays live is said once, by the node that made them, and carried by the
item (`FetchedBlock.device`, `Batch.device`, `Batch.staged`): the nodes after it read
that, never the arrays' types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from insitubatch_nodes.core.partition import EpochAssignment
from insitubatch_nodes.core.read_plan import ReadPlan

if TYPE_CHECKING:
    import torch

    from insitubatch_nodes.device.staging_ring import StagedBatch
    from insitubatch_nodes.io.reads.block_slots import BlockMemory


@dataclass(frozen=True, eq=False)
class UnitTicket:
    """One unit of a rank's epoch, at `position` in that rank's unit order.

    Args:
        assignment: the rank's units of the epoch (shared by every ticket of it).
        position: where the unit stands in the rank's order.
        unit: the unit's index in the store.
    """

    assignment: EpochAssignment
    position: int
    unit: int


@dataclass(frozen=True, eq=False)
class FetchedBlock:
    """A block's samples, decoded: per variable, the plan's buffer rows in one array.

    Args:
        plan: the read plan the block was read for.
        arrays: per variable, the array holding the block's rows.
        device: None when the arrays are numpy arrays on the host; else the device whose
            tensors they are (the fetch node's `decode_on`).
        memory: where the block's rows lie in `arrays` when not as the plan's buffer
            (leased slots, `io.reads.block_slots`); holding it keeps them leased. None: each
            array is laid out as the plan's buffer.
    """

    plan: ReadPlan
    arrays: Mapping[str, Any]
    device: torch.device | None = None
    memory: BlockMemory | None = None

    def rows(self, variable: str, buffer_rows: np.ndarray) -> np.ndarray:
        """The rows of `arrays[variable]` that hold the plan's buffer rows `buffer_rows`.

        Args:
            variable: the variable.
            buffer_rows: rows of the plan's buffer (`ReadPlan.rows`), any shape.
        """
        return buffer_rows if self.memory is None else self.memory.rows(variable, buffer_rows)

    def buffer(self, variable: str) -> Any:
        """The plan's buffer of `variable` (`plan.buffer_rows[variable]` rows in plan
        order): `arrays[variable]` itself when laid out so, else a copy of the block's
        rows. For inspecting a block; the gather indexes `arrays` through `rows`.

        Args:
            variable: the variable.
        """
        array = self.arrays[variable]
        if self.memory is None:
            return array
        return array[self.rows(variable, np.arange(self.plan.buffer_rows[variable]))]

    def without_chunk_reads(self) -> FetchedBlock:
        """This block once read: its plan without its chunk reads (each variable's
        `reads` empty; every other field as planned), which nothing needs after the
        fetch. A pool holds a block for many batches, and the plan's records, about one
        per chunk, would stay alive as long: long enough to reach the garbage
        collector's oldest generation, where enough newcomers bring a full collection,
        which at one step per chunk cost 2-5 us a chunk averaged (issue 33).
        """
        spent = replace(self.plan, reads={name: () for name in self.plan.reads})
        return replace(self, plan=spent)


@dataclass(frozen=True, eq=False)
class BatchDraw:
    """Which rows of which resident blocks form the next batch, and in what order.

    The order is carried as one permutation rather than by splitting the parts into runs
    of one sample each: an interleaved pool batch (`core.pool_order.batch_interleave`)
    would be a part per sample, and the gather's Python work would scale with samples.

    Args:
        parts: each block the batch draws from, with the block rows it takes.
        holds: what must stay alive until the batch is gathered: the slot leases of the
            units that gave their last samples to it (`BlockMemory.unit_lease`), which the
            pool shuffle no longer holds; the gather never reads it.
        order: batch row i is row `order[i]` of the parts' rows concatenated (a
            permutation of `size` rows); None: the parts' rows in order.
    """

    parts: tuple[tuple[FetchedBlock, np.ndarray], ...]
    holds: tuple[object, ...] = ()
    order: np.ndarray | None = None

    @property
    def size(self) -> int:
        return sum(len(rows) for _, rows in self.parts)


class Batch(dict[str, Any]):
    """A gathered batch: a dict of arrays by key (what a user's stage reads and edits
    like any dict), saying where they live for the nodes after it.

    A dict, not a new container, so that a torchdata `Mapper` that edits the batch in
    place keeps what it says; a stage that returns a new plain dict says nothing, and
    the nodes after it take its arrays as host numpy arrays (`as_batch`).

    Args:
        arrays: the batch's arrays by key.
        device: None when the arrays are numpy arrays on the host; else the device whose
            tensors the fields are (blocks decoded there). The keys of `core.batch_fields.HOST_KEYS`
            (`sample_index`, `patch_origin`) are host numpy arrays either way.
        staged: the page-locked ring slot every host array but `sample_index` was
            written into in place (`GatherNode(pin_memory=True)`, or
            `StackChannelsNode(pin_memory=True)`), so the device copy takes the slot's
            bytes in one transfer; None when they were not.
    """

    def __init__(
        self,
        arrays: Mapping[str, Any],
        *,
        device: torch.device | None = None,
        staged: StagedBatch | None = None,
    ) -> None:
        super().__init__(arrays)
        self.device = device
        self.staged = staged


def as_batch(batch: Mapping[str, Any]) -> Batch:
    """`batch` itself when it is a `Batch`; any other mapping (a user's stage that built a
    new dict) says nothing of its arrays, and is taken as numpy arrays on the host, in
    no staging slot.

    Args:
        batch: a batch from `GatherNode`, `StackChannelsNode` or a user's stage.
    """
    return batch if isinstance(batch, Batch) else Batch(batch)
