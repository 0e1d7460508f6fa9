"""What flows between the nodes. Items carry references to shared, immutable plan objects;
only `FetchedBlock` carries array data, and no node state ever does."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.partition import EpochAssignment
from insitubatch_nodes.core.read_plan import ReadPlan

SAMPLE_INDEX_KEY = "sample_index"
PATCH_ORIGIN_KEY = "patch_origin"  # with patches: (batch, axes) crop origin of each sample


@dataclass(frozen=True, eq=False)
class UnitTicket:
    """One unit of a rank's epoch, at `position` in that rank's unit order."""

    assignment: EpochAssignment
    position: int
    unit: int


@dataclass(frozen=True, eq=False)
class FetchedBlock:
    """A block's samples, decoded: one array per variable, rows in `plan.sample_index` order."""

    plan: ReadPlan
    arrays: Mapping[str, np.ndarray]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays.values())


@dataclass(frozen=True, eq=False)
class BatchDraw:
    """Which rows of which resident blocks form the next batch, in batch order."""

    parts: tuple[tuple[FetchedBlock, np.ndarray], ...]

    @property
    def size(self) -> int:
        return sum(len(rows) for _, rows in self.parts)
