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
from insitubatch_nodes.core.patches import PatchSpec
from insitubatch_nodes.core.sample_spec import SampleSpec


@dataclass(frozen=True, eq=False)
class AnchorSet:
    """The valid anchors of one split under one spec, unit by unit."""

    geometry: SampleGeometry
    spec: SampleSpec | None
    runs: np.ndarray  # (R, 2) [start, stop) anchor ranges, one per contiguous run of units
    patches: PatchSpec | None = None
    samples_per_anchor: int = 1  # > 1 for evaluation tiles: one sample per (anchor, tile)

    @classmethod
    def for_split(
        cls,
        geometry: SampleGeometry,
        split_units: np.ndarray,
        spec: SampleSpec | None = None,
        patches: PatchSpec | None = None,
    ) -> AnchorSet:
        lo, hi = spec.span if spec is not None else (0, 0)
        ranges = np.asarray(units_to_ranges(split_units), dtype=np.int64).reshape(-1, 2)
        starts = ranges[:, 0] * geometry.unit_length
        stops = np.minimum(ranges[:, 1] * geometry.unit_length, geometry.num_samples)
        runs = np.stack([starts - lo, stops - hi], axis=1)
        runs = runs[runs[:, 1] > runs[:, 0]]
        per_anchor = 1
        if patches is not None:
            names = spec.variables() if spec is not None else list(geometry.variables)
            per_anchor = patches.samples_per_anchor(patch_grid(geometry, names, patches))
        return cls(geometry, spec, runs.reshape(-1, 2), patches, per_anchor)

    @classmethod
    def everything(cls, geometry: SampleGeometry) -> AnchorSet:
        """Every time step of the array, one step per sample: the spec-less loader."""
        return cls(geometry, None, np.array([[0, geometry.num_samples]], dtype=np.int64))

    @property
    def unit_length(self) -> int:
        """Samples in a full unit (its steps, times the tiles per anchor)."""
        return self.geometry.unit_length * self.samples_per_anchor

    @property
    def grid(self) -> tuple[int, ...]:
        """The axes patches crop (the last `len(patches.size)` axes); () without patches."""
        if self.patches is None:
            return ()
        names = self.spec.variables() if self.spec is not None else list(self.geometry.variables)
        return patch_grid(self.geometry, names, self.patches)

    def _bounds(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """First and one-past-last anchor of each unit (empty when stop <= start)."""
        units = np.asarray(units, dtype=np.int64)
        starts = units * self.geometry.unit_length
        stops = np.minimum(starts + self.geometry.unit_length, self.geometry.num_samples)
        if self.runs.size == 0:
            return starts, starts
        # each unit lies inside at most one run: the last run starting at or before it
        which = np.clip(np.searchsorted(self.runs[:, 0], stops - 1, side="right") - 1, 0, None)
        lo = np.maximum(starts, self.runs[which, 0])
        hi = np.minimum(stops, self.runs[which, 1])
        return lo, np.maximum(hi, lo)

    def unit_sizes(self, units: np.ndarray) -> np.ndarray:
        lo, hi = self._bounds(units)
        return (hi - lo) * self.samples_per_anchor

    def unit_samples(self, units: np.ndarray) -> np.ndarray:
        """Sample ids of `units` (`anchor * samples_per_anchor + tile`; the anchor itself
        without tiles), in the given unit order, ascending in each."""
        lo, hi = self._bounds(units)
        m = self.samples_per_anchor
        lo, sizes = lo * m, (hi - lo) * m
        offsets = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(
            np.cumsum(sizes) - sizes, sizes
        )
        return np.repeat(lo, sizes) + offsets

    @property
    def units(self) -> np.ndarray:
        """Sorted units holding at least one anchor: what an epoch permutes."""
        length = self.geometry.unit_length
        candidates = [
            np.arange(start // length, -(-stop // length), dtype=np.int64)
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


def patch_grid(geometry: SampleGeometry, names: list[str], patches: PatchSpec) -> tuple[int, ...]:
    """The grid every read variable shares on the axes patches crop."""
    k = len(patches.size)
    grids = {n: geometry.variables[n].sample_shape[-k:] for n in names}
    short = [n for n in names if len(geometry.variables[n].sample_shape) < k]
    if short or len(set(grids.values())) != 1:
        raise ValueError(
            f"patches of size {patches.size} crop the last {k} axes of every variable, but "
            + ", ".join(f"{n} has {geometry.variables[n].sample_shape}" for n in names)
            + "; select variables on one grid"
        )
    cropped = [
        n
        for n in names
        if (pick := geometry.variables[n].pick) is not None
        and pick.axis >= len(geometry.variables[n].shape) - k
    ]
    if cropped:
        raise ValueError(
            f"patches of size {patches.size} crop the last {k} axes, but {cropped} keep only "
            f"some positions of one of them; pick positions of an axis patches do not crop"
        )
    grid = next(iter(grids.values()))
    patches.check_grid(grid)
    return grid
