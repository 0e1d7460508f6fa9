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
from insitubatch_nodes.core.step_runs import most_run_starts
from insitubatch_nodes.core.unit_grid import is_aligned, unit_rows_bound


@dataclass(frozen=True, eq=False)
class AnchorSet:
    """The valid anchors of one split under one spec, unit by unit.

    Args:
        geometry: the variables and their unit grid.
        spec: the sample spec the anchors were chosen for (its offsets in stored steps), or
            None for one step per sample.
        anchors: every anchor, sorted, each once (int64 steps of the sample axis).
        patches: the patch spec, or None for whole samples.
        samples_per_anchor: > 1 for evaluation tiles: one sample per (anchor, tile).
        full_unit: the anchors a unit holds when no split edge, gap or store end cuts it;
            None for every step of a unit (a stride keeps fewer: `for_steps(allowed=...)`).
    """

    geometry: SampleGeometry
    spec: SampleSpec | None
    anchors: np.ndarray
    patches: PatchSpec | None = None
    samples_per_anchor: int = 1
    full_unit: int | None = None

    @classmethod
    def for_split(
        cls,
        geometry: SampleGeometry,
        split_units: np.ndarray,
        spec: SampleSpec | None = None,
        patches: PatchSpec | None = None,
    ) -> AnchorSet:
        """The anchors of a split made of whole units (`SplitManifest.units`).

        Args:
            geometry: the variables and their unit grid.
            split_units: the split's unit ids.
            spec: the sample spec, or None for one step per sample.
            patches: the patch spec, or None for whole samples.
        """
        ranges = np.asarray(units_to_ranges(split_units), dtype=np.int64).reshape(-1, 2)
        starts, _ = geometry.unit_bounds(ranges[:, 0])
        _, stops = geometry.unit_bounds(ranges[:, 1] - 1)
        return cls.for_steps(geometry, np.stack([starts, stops], axis=1), spec, patches)

    @classmethod
    def for_steps(
        cls,
        geometry: SampleGeometry,
        step_ranges: np.ndarray,
        spec: SampleSpec | None = None,
        patches: PatchSpec | None = None,
        *,
        allowed: np.ndarray | None = None,
    ) -> AnchorSet:
        """The anchors of a split given as [start, stop) ranges of steps, which may cut
        through units (a split by dates): a unit shared with another split holds only
        this split's anchors, and THE RULE keeps every window inside this split's steps.

        Args:
            geometry: the variables and their unit grid.
            step_ranges: (R, 2) [start, stop) step ranges, disjoint, in any order.
            spec: the sample spec (offsets in stored steps), or None for one step per sample.
            patches: the patch spec, or None for whole samples.
            allowed: a bool per step of the sample axis: which steps may be anchors at all
                (a stride, a frequency, no gap inside the window: `core.time_steps`), or
                None for every one.
        """
        lo, hi = spec.span if spec is not None else (0, 0)
        ranges = np.asarray(step_ranges, dtype=np.int64).reshape(-1, 2)
        runs = np.stack([ranges[:, 0] - lo, ranges[:, 1] - hi], axis=1)
        runs = runs[runs[:, 1] > runs[:, 0]]
        anchors = np.sort(
            np.concatenate(
                [np.zeros(0, dtype=np.int64)]
                + [np.arange(a, b, dtype=np.int64) for a, b in runs.tolist()]
            )
        )
        full_unit = None
        if allowed is not None:
            allowed = np.asarray(allowed, dtype=bool)
            if allowed.shape != (geometry.num_samples,):
                raise ValueError(
                    f"allowed must hold one bool per step ({geometry.num_samples}), got shape "
                    f"{allowed.shape}"
                )
            anchors = anchors[allowed[anchors]]
            full_unit = _full_unit(geometry, allowed)
        per_anchor = 1
        if patches is not None:
            names = spec.variables() if spec is not None else list(geometry.variables)
            per_anchor = patches.samples_per_anchor(patch_grid(geometry, names, patches))
        return cls(geometry, spec, anchors, patches, per_anchor, full_unit)

    @classmethod
    def everything(cls, geometry: SampleGeometry) -> AnchorSet:
        """Every time step of the array, one step per sample: the spec-less loader."""
        return cls(geometry, None, np.arange(geometry.num_samples, dtype=np.int64))

    @property
    def unit_length(self) -> int:
        """Samples in a full unit (its anchors, times the tiles per anchor)."""
        full = self.geometry.unit_length if self.full_unit is None else self.full_unit
        return full * self.samples_per_anchor

    @property
    def grid(self) -> tuple[int, ...]:
        """The axes patches crop (the last `len(patches.size)` axes); () without patches."""
        if self.patches is None:
            return ()
        names = self.spec.variables() if self.spec is not None else list(self.geometry.variables)
        return patch_grid(self.geometry, names, self.patches)

    def _bounds(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Where each unit's anchors start and stop in `anchors` (equal when it has none)."""
        starts, stops = self.geometry.unit_bounds(units)
        first = np.searchsorted(self.anchors, starts, side="left")
        last = np.searchsorted(self.anchors, stops, side="left")
        return first, last

    def unit_sizes(self, units: np.ndarray) -> np.ndarray:
        first, last = self._bounds(units)
        return (last - first) * self.samples_per_anchor

    def unit_samples(self, units: np.ndarray) -> np.ndarray:
        """Sample ids of `units` (`anchor * samples_per_anchor + tile`; the anchor itself
        without tiles), in the given unit order, ascending in each."""
        first, last = self._bounds(units)
        counts = last - first
        at = np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(
            np.cumsum(counts) - counts, counts
        )
        chosen = self.anchors[np.repeat(first, counts) + at]
        m = self.samples_per_anchor
        if m == 1:
            return chosen
        return (chosen[:, None] * m + np.arange(m, dtype=np.int64)[None, :]).reshape(-1)

    @property
    def units(self) -> np.ndarray:
        """Sorted units holding at least one anchor: what an epoch permutes."""
        return np.unique(self.geometry.unit_of(self.anchors))

    def block_rows_bound(self, block_chunks: int) -> int:
        """Most buffer rows a block of `block_chunks` units holds: its steps plus, with a
        window or leads, the halo chunks on both sides of each unit. On a grid the chunks
        do not align with (`core.unit_grid`), the most slot rows any variable's pieces of
        a unit take."""
        lo, hi = self.spec.span if self.spec is not None else (0, 0)
        grid = self.geometry
        layouts = grid.variables.values()
        if not is_aligned(layouts, grid.unit_length, grid.phase):
            return block_chunks * max(
                unit_rows_bound(
                    layout.sample_chunk,
                    grid.unit_length,
                    -lo,
                    hi,
                    layout.origin + grid.phase,
                    most_run_starts(layout.runs, grid.unit_length + hi - lo),
                )
                for layout in layouts
            )
        rows = self.geometry.unit_length
        if hi > lo:
            widest = max(layout.sample_chunk for layout in self.geometry.variables.values())
            rows += hi - lo + 2 * widest
        return block_chunks * rows

    @property
    def num_anchors(self) -> int:
        return int(self.anchors.size)


def _full_unit(geometry: SampleGeometry, allowed: np.ndarray) -> int:
    """The most allowed steps any unit holds: what a unit away from the split's edges
    holds when the allowed steps are regular (a stride that divides the unit length, or
    that the unit length divides); at least 1."""
    length = geometry.unit_length
    padded = np.zeros(geometry.num_units * length, dtype=bool)
    padded[geometry.lead : geometry.lead + allowed.size] = allowed
    return max(1, int(padded.reshape(-1, length).sum(axis=1).max(initial=0)))


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
    repeated = [
        n
        for n in names
        for pick in geometry.variables[n].picks
        if pick.axis >= len(geometry.variables[n].shape) - k
        and len(pick.places) != len(pick.indices)
    ]
    if repeated:
        raise ValueError(
            f"patches of size {patches.size} crop the last {k} axes, but {repeated} hold a "
            f"position of one of them twice; pick each position of an axis patches crop once"
        )
    boxed = [
        n
        for n in names
        if any(p.axis >= len(geometry.variables[n].shape) - k for p in geometry.variables[n].picks)
    ]
    grid = next(iter(grids.values()))
    if boxed and any(s > g for s, g in zip(patches.size, grid, strict=True)):
        raise ValueError(
            f"patches of size {patches.size} are larger than the area's grid {grid} (the "
            f"grid points area= keeps of {boxed}); use a smaller patch or a larger area"
        )
    patches.check_grid(grid)
    return grid
