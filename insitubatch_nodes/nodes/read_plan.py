"""ReadPlanNode: groups units into blocks and plans each block's chunk reads once."""

from __future__ import annotations

from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.geometry import SampleGeometry
from insitubatch_nodes.core.read_plan import ReadPlan, plan_block
from insitubatch_nodes.items import UnitTicket
from insitubatch_nodes.nodes.state_checks import CONFIG_KEY, check_saved_config


class ReadPlanNode(BaseNode[ReadPlan]):
    """Takes `block_chunks` tickets per plan; a block never spans two epochs.

    `geometry` is a `SampleGeometry` (one time step per sample) or an `AnchorSet` (samples
    of a sample spec, planned with their windows' halo chunks). Holds no position of its
    own: the block index follows from the ticket positions, and its source is always
    checkpointed at a block boundary.
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
        if block_chunks < 1:
            raise ValueError(f"block_chunks must be >= 1, got {block_chunks}")
        self.source = source
        self.geometry = geometry
        self.anchors = (
            geometry if isinstance(geometry, AnchorSet) else AnchorSet.everything(geometry)
        )
        self.block_chunks = block_chunks

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        if initial_state is not None:
            check_saved_config(type(self).__name__, initial_state, self._config())
        self.source.reset(None if initial_state is None else initial_state[self.SOURCE_KEY])

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
        return {self.SOURCE_KEY: self.source.state_dict(), CONFIG_KEY: self._config()}
