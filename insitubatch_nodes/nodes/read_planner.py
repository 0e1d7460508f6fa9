"""ReadPlanNode: groups units into blocks and plans each block's chunk reads once.

The plan itself, which chunks a block reads and where each lands, is the pure
`core.read_plan`; this node is the stage that makes plans from the units dealt to it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.drained_units import DrainedUnits
from insitubatch_nodes.core.geometry import SampleGeometry
from insitubatch_nodes.core.read_plan import ReadPlan, plan_block
from insitubatch_nodes.core.settings import as_int
from insitubatch_nodes.nodes import state_names
from insitubatch_nodes.nodes.items import UnitTicket
from insitubatch_nodes.nodes.state_checks import (
    CONFIG_KEY,
    check_node_state,
    check_saved_config,
    named_state,
)
from insitubatch_nodes.nodes.state_views import state_reader


class ReadPlanNode(BaseNode[ReadPlan]):
    """Takes `block_chunks` tickets per plan; a block never spans two epochs.

    `geometry` is a `SampleGeometry` (one time step per sample) or an `AnchorSet` (samples
    of a sample spec, planned with their windows' halo chunks). Holds no position of its
    own: the block index follows from the ticket positions, and its source is always
    checkpointed at a block boundary.

    A restored pool shuffle tells it which units of the epoch it drained before the cut
    (`leave_out_drained`); their blocks are then planned without them, and a block left
    with none is not planned at all, so a resume reads, decodes and holds only the units
    the rest of the epoch draws from. The blocks keep their boundaries and indices (the
    tickets are still taken `block_chunks` at a time), so the source state after a block
    is the same whichever units it left out, and a state saved later resumes as before.
    This node does it because it decides what a block reads; the units still come from
    the `ChunkPermuteNode` in full, whose order and state nothing here changes.

    Args:
        source: the unit tickets (`ChunkPermuteNode`).
        geometry: the samples' geometry, or the anchors of a sample spec.
        block_chunks: units per block (an int >= 1).
    """

    STATE_NAME = state_names.READ_PLAN
    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[UnitTicket],
        geometry: SampleGeometry | AnchorSet,
        *,
        block_chunks: int,
    ) -> None:
        super().__init__()
        block_chunks = as_int("block_chunks", block_chunks, minimum=1)
        self.source = source
        self._read_source_state = state_reader(source)  # kept states: no copy per pull
        self.geometry = geometry
        self.anchors = (
            geometry if isinstance(geometry, AnchorSet) else AnchorSet.everything(geometry)
        )
        self.block_chunks = block_chunks
        self._drained: DrainedUnits | None = None
        self._planned = False  # a plan was made since the last reset

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._planned = False
        if initial_state is None:
            self._drained = None  # a new epoch: its units are all to read
            self.source.reset(None)
            return
        state = check_node_state(self, initial_state, (self.SOURCE_KEY,))
        self.source.reset(state[self.SOURCE_KEY])  # other data upstream is named first
        check_saved_config(self, state, self._config())

    def leave_out_drained(self, drained: DrainedUnits | None) -> None:
        """Plan the rest of this epoch without the units `drained` says a restored pool
        shuffle drained before its state was saved (None: plan every unit). What
        `PoolShuffleNode` calls when it is reset with a state, right after the reset that
        put this node at the state's block and before any block is planned, so that no
        drained unit is ever read. It holds for the epoch: through later resets to states
        of the same epoch (the fetch node rewinds this node so after a `close()`) until
        the next `reset(None)`, or the next call.

        Args:
            drained: the drained units of the epoch this node was reset into, or None.

        Raises:
            RuntimeError: a block of this epoch was planned since the reset: it may hold a
                drained unit, and be read already.
        """
        if drained is not None and self._planned:
            raise RuntimeError(
                "leave_out_drained must come before the first block is planned after a "
                "reset: a block planned already may hold a drained unit"
            )
        self._drained = drained

    def next(self) -> ReadPlan:
        while True:
            tickets = self._next_block()
            if self._drained is not None:
                positions = np.array([t.position for t in tickets], dtype=np.int64)
                drained = self._drained.drained(tickets[0].assignment, positions).tolist()
                kept = [t for t, gone in zip(tickets, drained, strict=True) if not gone]
            else:
                kept = tickets
            if kept:
                break
        self._planned = True
        return plan_block(
            self.anchors,
            np.array([t.unit for t in kept], dtype=np.int64),
            assignment=tickets[0].assignment,
            block_index=tickets[0].position // self.block_chunks,
        )

    def _next_block(self) -> list[UnitTicket]:
        """The next `block_chunks` tickets (fewer at the epoch's end)."""
        tickets: list[UnitTicket] = []
        while len(tickets) < self.block_chunks:
            try:
                tickets.append(next(self.source))
            except StopIteration:
                break
        if not tickets:
            raise StopIteration
        first = tickets[0]
        if first.position % self.block_chunks:
            raise ValueError(
                f"unit position {first.position} is not at a block boundary of "
                f"block_chunks={self.block_chunks}: the state was saved with another block size"
            )
        return tickets

    def _config(self) -> dict[str, Any]:
        spec = self.anchors.spec
        return {
            "block_chunks": self.block_chunks,
            "unit_length": self.anchors.unit_length,
            "sample_spec": None if spec is None else spec.to_json(),
            "patches": None if self.anchors.patches is None else self.anchors.patches.to_json(),
        }

    def get_state(self) -> dict[str, Any]:
        return named_state(
            self, {self.SOURCE_KEY: self.source.state_dict(), CONFIG_KEY: self._config()}
        )

    def state_view(self) -> dict[str, Any]:
        """The state without a copy, for a node downstream to keep unchanged
        (`nodes.state_views`)."""
        return named_state(
            self, {self.SOURCE_KEY: self._read_source_state(), CONFIG_KEY: self._config()}
        )
