"""The unit grid: which runs of steps are units, and what a unit's rows cost in memory.

By default a unit is the least common multiple of the variables' sample-axis chunk lengths,
so every chunk lies in one unit. Misaligned chunkings make that unit huge (5, 7 and 12
steps: 420), and a store of a few such units has no train/val/test split and no rank
partition. The rule (`needs_fine_grid`): when some split of the manifest cut on that grid
holds no unit of its own, the manifest is cut again on the *fine grid*, units of the
shortest chunk length. It depends on the store and the splits asked for only, never on
the host nor the world size, so every machine and any number of ranks read one grid.

On a fine grid a chunk may straddle units, and revisits (`SampleGeometry.visits`) cut
units finer than any chunk: a block then reads, per variable, one *piece* per (chunk,
unit cell) its samples need, each keeping only its rows (`core.read_plan`). A piece is
never longer than the chunk nor than the unit, so block memory is cut into slots of
`slot_rows` rows, and `unit_rows_bound` is the most slot rows one unit's samples (with
their window's halo) take.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import SplitManifest


def is_aligned(layouts: Iterable[VariableLayout], unit_length: int, phase: int = 0) -> bool:
    """Whether every unit boundary is a chunk boundary of every variable (the unit length
    a multiple of every sample-axis chunk length, and on a join the first full unit's
    stored step, its store's origin plus the phase, too, with no steps left out inside
    the store's run, `VariableLayout.runs`): then each chunk is read whole, once.

    Args:
        layouts: the variables' layouts.
        unit_length: steps per unit.
        phase: the step where the first full unit starts (`SampleGeometry.phase`).
    """
    return all(
        unit_length % layout.sample_chunk == 0
        and (layout.origin + phase) % layout.sample_chunk == 0
        and not layout.runs
        for layout in layouts
    )


def finest_chunk(layouts: Iterable[VariableLayout]) -> int:
    """The shortest sample-axis chunk length: the fine grid's unit length.

    Args:
        layouts: the variables' layouts (at least one).
    """
    return min(layout.sample_chunk for layout in layouts)


def own_units(step_ranges: np.ndarray, unit_length: int, num_samples: int, lead: int = 0) -> int:
    """Units lying wholly inside a split's steps (the array's short first and last units
    count when the split reaches the axis' end): the units no other split shares.

    Args:
        step_ranges: the split's (R, 2) [start, stop) step ranges.
        unit_length: steps per unit.
        num_samples: steps along the sample axis.
        lead: the steps unit 0 lacks before step 0 (`SampleGeometry.lead`).
    """
    ranges = np.asarray(step_ranges, dtype=np.int64).reshape(-1, 2)
    begin, end = ranges[:, 0] + lead, ranges[:, 1] + lead
    first = np.where(ranges[:, 0] == 0, 0, -(-begin // unit_length))
    stop = np.where(ranges[:, 1] == num_samples, -(-end // unit_length), end // unit_length)
    return int(np.maximum(stop - first, 0).sum())


def needs_fine_grid(own: Mapping[str, int]) -> bool:
    """Whether a manifest cut on the least-common-multiple grid leaves too few units: some
    split holds no unit of its own (none, or only units it shares across a boundary), so
    it has nothing to permute or deal to ranks. It asks nothing of the world size, so a
    store's grid is the same on any number of ranks (a state resumes on another), and a
    split with fewer units than ranks is refused as on any grid.

    Args:
        own: per split, the units wholly inside it (`own_units`).
    """
    return any(count < 1 for count in own.values())


def grid_manifest(
    layouts: Mapping[str, VariableLayout], cut: Callable[[SampleGeometry], SplitManifest]
) -> SplitManifest:
    """The manifest `cut` makes on the least-common-multiple grid, or, when that leaves
    some split no unit of its own (`needs_fine_grid`) and the chunks are misaligned, the
    one it makes on the fine grid.

    Args:
        layouts: the selected variables' layouts.
        cut: makes a manifest on a grid (the default fractions, or dates).
    """
    coarse = SampleGeometry.from_layouts(layouts)
    manifest = cut(coarse)
    fine = finest_chunk(layouts.values())
    if fine == coarse.unit_length:
        return manifest
    own = {
        name: own_units(
            manifest.step_ranges(name) if ranges else np.zeros((0, 2), dtype=np.int64),
            coarse.unit_length,
            coarse.num_samples,
            coarse.lead,
        )
        for name, ranges in manifest.splits.items()
    }
    if not needs_fine_grid(own):
        return manifest
    return cut(SampleGeometry.from_layouts(layouts, unit_length=fine))


def slot_rows(chunk: int, unit_length: int) -> int:
    """Rows of one block-memory slot of a variable chunked `chunk` along the sample axis:
    a piece (a chunk's rows inside one unit cell) is never longer.

    Args:
        chunk: the variable's sample-axis chunk length.
        unit_length: steps per unit.
    """
    return min(chunk, unit_length)


def _most_inner_boundaries(length: int, spacing: int) -> int:
    """Most multiples of `spacing` strictly inside a run of `length` steps, wherever it
    starts (boundaries cut a run between two of its steps)."""
    return -(-(length - 1) // spacing) if length > 1 else 0


def _most_cell_pieces(unit_length: int, chunk: int, origin: int) -> int:
    """Most pieces a unit cell (starting at a multiple of the unit length, stored step
    `origin` more) is cut into by chunk boundaries: exact, over every cell's phase
    against the chunks."""
    phases = chunk // math.gcd(unit_length, chunk)
    starts = [k * unit_length + origin for k in range(phases)]
    return 1 + max((start + unit_length - 1) // chunk - start // chunk for start in starts)


def unit_rows_bound(
    chunk: int, unit_length: int, before: int, after: int, origin: int = 0, jumps: int = 0
) -> int:
    """Most block-memory rows (whole slots) one unit's samples take in a variable chunked
    `chunk` along the sample axis, on a grid the chunks do not align with: the pieces of
    its own cell, and of the `before` steps before it and `after` steps after it that its
    windows and leads reach (each piece its own slot of `slot_rows` rows).

    Args:
        chunk: the variable's sample-axis chunk length.
        unit_length: steps per unit.
        before: steps before a unit its samples need (a window's length less one).
        after: steps after a unit its samples need (the furthest lead).
        origin: the stored step where a full unit cell starts (a joined store's
            `VariableLayout.origin` plus the grid's phase): the cells' phase against the
            chunks.
        jumps: the most places a unit's steps, with their halo, jump over stored steps
            an inner join left out (`core.step_runs.most_run_starts`). Past a jump the
            cells meet the chunks at any phase, and each jump cuts a run in two, whose
            parts may each cross one chunk boundary more: two pieces more a jump.
    """
    if jumps:
        pieces = 1 + _most_inner_boundaries(unit_length, chunk) + 2 * jumps
    else:
        pieces = _most_cell_pieces(unit_length, chunk, origin)
    for reach in (before, after):
        if reach > 0:
            pieces += (
                1
                + _most_inner_boundaries(reach, chunk)
                + _most_inner_boundaries(reach, unit_length)
            )
    return pieces * slot_rows(chunk, unit_length)
