"""Read plans: the chunks a block of units needs, once each, and where each one lands.

A block's samples sit in one buffer per variable, the units stacked in block order. Each
chunk along the sample axis lies inside exactly one unit (units are chunk-aligned for every
variable), so every chunk is read once per block and written to one place, however many
samples use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.geometry import SampleGeometry
from insitubatch_nodes.core.partition import EpochAssignment


@dataclass(frozen=True)
class ChunkRead:
    """Read chunk `coords` of a variable into rows starting at `dest_row` of its block buffer."""

    coords: tuple[int, ...]
    dest_row: int


@dataclass(frozen=True, eq=False)
class ReadPlan:
    """Everything needed to fetch one block; `assignment` ties it to its (seed, epoch, rank)."""

    assignment: EpochAssignment
    block_index: int
    units: np.ndarray
    sample_index: np.ndarray
    reads: Mapping[str, tuple[ChunkRead, ...]]

    @property
    def num_samples(self) -> int:
        return int(self.sample_index.size)

    @property
    def num_reads(self) -> int:
        return sum(len(r) for r in self.reads.values())


def plan_block(
    geometry: SampleGeometry,
    units: np.ndarray,
    *,
    assignment: EpochAssignment,
    block_index: int,
) -> ReadPlan:
    units = np.asarray(units, dtype=np.int64)
    sizes = geometry.unit_sizes(units)
    offsets = np.cumsum(sizes) - sizes
    reads: dict[str, tuple[ChunkRead, ...]] = {}
    for name, layout in geometry.variables.items():
        wanted: dict[tuple[int, ...], int] = {}
        for unit, offset in zip(units.tolist(), offsets.tolist(), strict=True):
            unit_start = unit * geometry.unit_length
            for coords in geometry.iter_unit_chunks(name, unit):
                wanted.setdefault(coords, offset + coords[0] * layout.sample_chunk - unit_start)
        reads[name] = tuple(ChunkRead(c, row) for c, row in wanted.items())
    return ReadPlan(
        assignment=assignment,
        block_index=block_index,
        units=units,
        sample_index=geometry.unit_samples(units),
        reads=reads,
    )
