"""Which anchors a split may use: those whose whole window stays inside the split.

THE RULE (also recorded in every manifest, `core.manifest.ANCHOR_RULE`): a sample anchored
at time t with offsets spanning [lo, hi] (the anchor itself included) belongs to split S
only if every time step t+lo .. t+hi lies in one contiguous run of S's units. So no input
window and no target ever reads a step of another split, nor jumps over one; anchors at
the edges of a run are dropped instead.

Anchors stay grouped by the unit they fall in, so everything built on units (epoch
permutation, rank shares, blocks, resume) works unchanged: a unit simply holds fewer
samples when it sits at the edge of a run, and units left without any anchor are not
part of the epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.geometry import SampleGeometry
from insitubatch_nodes.core.manifest import units_to_ranges
from insitubatch_nodes.core.sample_spec import SampleSpec


@dataclass(frozen=True, eq=False)
class AnchorSet:
    """The valid anchors of one split under one spec, unit by unit."""

    geometry: SampleGeometry
    spec: SampleSpec | None
    runs: np.ndarray  # (R, 2) [start, stop) anchor ranges, one per contiguous run of units

    @classmethod
    def for_split(
        cls, geometry: SampleGeometry, split_units: np.ndarray, spec: SampleSpec | None = None
    ) -> AnchorSet:
        lo, hi = spec.span if spec is not None else (0, 0)
        ranges = np.asarray(units_to_ranges(split_units), dtype=np.int64).reshape(-1, 2)
        starts = ranges[:, 0] * geometry.unit_length
        stops = np.minimum(ranges[:, 1] * geometry.unit_length, geometry.num_samples)
        runs = np.stack([starts - lo, stops - hi], axis=1)
        runs = runs[runs[:, 1] > runs[:, 0]]
        return cls(geometry, spec, runs.reshape(-1, 2))

    @classmethod
    def everything(cls, geometry: SampleGeometry) -> AnchorSet:
        """Every time step of the array, one step per sample: the spec-less loader."""
        return cls(geometry, None, np.array([[0, geometry.num_samples]], dtype=np.int64))

    @property
    def unit_length(self) -> int:
        return self.geometry.unit_length

    def _bounds(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """First and one-past-last anchor of each unit (empty when stop <= start)."""
        units = np.asarray(units, dtype=np.int64)
        starts = units * self.unit_length
        stops = np.minimum(starts + self.unit_length, self.geometry.num_samples)
        if self.runs.size == 0:
            return starts, starts
        # each unit lies inside at most one run: the last run starting at or before it
        which = np.clip(np.searchsorted(self.runs[:, 0], stops - 1, side="right") - 1, 0, None)
        lo = np.maximum(starts, self.runs[which, 0])
        hi = np.minimum(stops, self.runs[which, 1])
        return lo, np.maximum(hi, lo)

    def unit_sizes(self, units: np.ndarray) -> np.ndarray:
        lo, hi = self._bounds(units)
        return hi - lo

    def unit_samples(self, units: np.ndarray) -> np.ndarray:
        """Anchors of `units`, concatenated in the given unit order, ascending in each."""
        lo, hi = self._bounds(units)
        sizes = hi - lo
        offsets = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(
            np.cumsum(sizes) - sizes, sizes
        )
        return np.repeat(lo, sizes) + offsets

    @property
    def units(self) -> np.ndarray:
        """Sorted units holding at least one anchor: what an epoch permutes."""
        candidates = [
            np.arange(start // self.unit_length, -(-stop // self.unit_length), dtype=np.int64)
            for start, stop in self.runs.tolist()
        ]
        if not candidates:
            return np.zeros(0, dtype=np.int64)
        units = np.unique(np.concatenate(candidates))
        return units[self.unit_sizes(units) > 0]

    def block_rows_bound(self, block_chunks: int) -> int:
        """Most buffer rows a block of `block_chunks` units holds: its steps plus, with a
        window or leads, the halo chunks on both sides of each unit."""
        lo, hi = self.spec.span if self.spec is not None else (0, 0)
        rows = self.geometry.unit_length
        if hi > lo:
            widest = max(layout.sample_chunk for layout in self.geometry.variables.values())
            rows += hi - lo + 2 * widest
        return block_chunks * rows

    @property
    def num_anchors(self) -> int:
        return int((self.runs[:, 1] - self.runs[:, 0]).sum())
