"""ReadPlanNode: groups units into blocks and plans each block's chunk reads once."""

from __future__ import annotations

from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.geometry import SampleGeometry
from insitubatch_nodes.core.read_plan import ReadPlan, plan_block
from insitubatch_nodes.core.settings import as_int
from insitubatch_nodes.items import UnitTicket
from insitubatch_nodes.nodes.state_checks import (
    CONFIG_KEY,
    check_node_state,
    check_saved_config,
    named_state,
)


class ReadPlanNode(BaseNode[ReadPlan]):
    """Takes `block_chunks` tickets per plan; a block never spans two epochs.

    `geometry` is a `SampleGeometry` (one time step per sample) or an `AnchorSet` (samples
    of a sample spec, planned with their windows' halo chunks). Holds no position of its
    own: the block index follows from the ticket positions, and its source is always
    checkpointed at a block boundary.

    Args:
        source: the unit tickets (`ChunkPermuteNode`).
        geometry: the samples' geometry, or the anchors of a sample spec.
        block_chunks: units per block (an int >= 1).
    """

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
        self.geometry = geometry
        self.anchors = (
            geometry if isinstance(geometry, AnchorSet) else AnchorSet.everything(geometry)
        )
        self.block_chunks = block_chunks

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        if initial_state is None:
            self.source.reset(None)
            return
        state = check_node_state(self, initial_state, (self.SOURCE_KEY,))
        self.source.reset(state[self.SOURCE_KEY])  # other data upstream is named first
        check_saved_config(self, state, self._config())

    def next(self) -> ReadPlan:
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
        return plan_block(
            self.anchors,
            np.array([t.unit for t in tickets], dtype=np.int64),
            assignment=first.assignment,
            block_index=first.position // self.block_chunks,
        )

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
