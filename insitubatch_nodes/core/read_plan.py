"""Read plans: the chunks a block of units needs, once each, and where each one lands.

A block's anchors need, per variable, the time steps `anchor + offset` for the offsets
their sample spec asks of that variable (offset 0 alone without a spec). Every sample-axis
chunk holding such a step is read once per block, whichever and however many anchors need
it: an input window reaching into the previous chunk (the halo) costs one extra read per
block, not one per sample. Chunks are laid out in the block buffer in the order the
block's anchors first need them, so without a spec the buffer is simply the block's units
stacked in block order, one row per sample.

On a grid the chunks do not align with (a fine grid, revisits: `core.unit_grid`), a
chunk is read once per *piece* instead: the rows the block needs of it inside one unit
cell, kept alone (`ChunkRead.rows`), so a chunk straddling two units is read for each and
a unit's rows lie in pieces of its own.

`rows[variable]` maps (anchor, offset) to a buffer row, so the gather is vectorised:
one take per variable and run of blocks sharing an array (`nodes.gather`).
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.axis_pick import AxisPick
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import EpochAssignment
from insitubatch_nodes.core.patches import PatchSpec, touched_chunks
from insitubatch_nodes.core.sample_spec import SampleSpec
from insitubatch_nodes.core.step_runs import run_index
from insitubatch_nodes.core.unit_grid import is_aligned


@dataclass(frozen=True)
class ChunkRead:
    """Read chunk `coords` of a variable into rows starting at `dest_row` of its block buffer.

    Args:
        coords: the chunk's coordinates in the array's (inner) chunk grid.
        dest_row: the block buffer row its first kept row lands on.
        rows: the chunk's rows to keep, `(start, stop)` counted from its first row, or
            None for all of them (e.g. only the rows of a unit when a chunk holds several).
    """

    coords: tuple[int, ...]
    dest_row: int
    rows: tuple[int, int] | None = None


Keep = tuple[slice | np.ndarray, ...]  # an index of a stored chunk: slices, or kept positions


def chunk_regions(layout: VariableLayout, read: ChunkRead) -> tuple[tuple[slice, ...], Keep]:
    """Where `read`'s chunk goes in its block buffer, and which part of the stored chunk
    is kept there (edge chunks are stored padded to the full chunk shape; a read may keep
    a row range; a layout's picks keep some positions of some axes).

    Every reader, host or device, places chunks with this one function, so a block
    buffer means the same thing whichever path filled it: `buffer[target] =
    stored_chunk[keep]`, where the buffer's axis 0 is block rows (from `read.dest_row`),
    a picked axis counts kept positions, and its other axes are the array's own. When the
    kept part is smaller than the chunk, readers decode into bounded scratch first. A
    chunk whose kept positions are uneven along several picked axes (levels 1000, 850
    and 500 of a box whose columns cross the seam) keeps an open mesh of them
    (`np.ix_`), which numpy and torch index alike: the product of the axes' positions.

    Decode threads call this once per chunk (issue 33), and most chunks of a variable
    share everything but `dest_row`: the regions of a chunk depend on its inner
    coordinates, on how many rows it holds (only the last chunk along the sample axis
    holds fewer) and on the rows kept. So they are computed once per such class and
    layout (`_RegionCache`); a call then only places the first slice at `dest_row`. Kept
    positions are arrays shared by every caller: index with them, never write them (not
    marked read-only, as torch warns about such arrays when it indexes with them).

    Args:
        layout: the variable's layout (the cache is keyed on this object, which is frozen).
        read: the chunk and where it lands.
    """
    cache = _region_cache(layout)
    coords = read.coords
    first = coords[0] * cache.sample_chunk
    valid_rows = min(cache.sample_chunk, cache.stored_steps - first)
    key = (coords[1:], valid_rows, read.rows)
    found = cache.classes.get(key)
    if found is None:
        found = _class_regions(layout, coords, valid_rows, read.rows)
        cache.remember(key, found)
    length, inner_target, keep = found
    return (slice(read.dest_row, read.dest_row + length), *inner_target), keep


_Regions = tuple[int, tuple[slice | np.ndarray, ...], Keep]  # rows landing, inner target, keep


def _class_regions(
    layout: VariableLayout, coords: tuple[int, ...], valid_rows: int, rows: tuple[int, int] | None
) -> _Regions:
    """A chunk's regions but for where its rows land (see `chunk_regions`): how many
    rows it lands, its target along the inner axes, and its kept part."""
    selection = layout.chunk_selection(coords)
    start, stop = (0, valid_rows) if rows is None else rows
    if not 0 <= start < stop <= valid_rows:
        raise ValueError(f"rows {rows} of chunk {coords} are not within its {valid_rows} rows")
    target: list[slice | np.ndarray] = []
    keep: list[slice | np.ndarray] = [slice(start, stop)]
    for axis, region in enumerate(selection[1:], start=1):
        pick = layout.pick_on(axis)
        if pick is not None:
            kept, landing = pick.within(region.start, region.stop)
            target.append(landing)
            keep.append(kept)
        else:
            target.append(region)
            keep.append(slice(0, region.stop - region.start))
    if sum(isinstance(k, np.ndarray) for k in keep) > 1:  # numpy would pair them up
        return stop - start, tuple(target), np.ix_(*(_positions(k) for k in keep))
    return stop - start, tuple(target), tuple(keep)


class _RegionCache:
    """One layout's regions by chunk class (see `chunk_regions`), at most `LIMIT` of
    them (a store with more inner chunks than that starts over rather than grow)."""

    LIMIT = 4096

    def __init__(self, layout: VariableLayout) -> None:
        self.sample_chunk = layout.sample_chunk
        self.stored_steps = layout.shape[0]
        self.classes: dict[tuple[object, ...], _Regions] = {}

    def remember(self, key: tuple[object, ...], regions: _Regions) -> None:
        if len(self.classes) >= self.LIMIT:
            self.classes.clear()
        self.classes[key] = regions


# By the layout's identity (a layout's hash walks its picks, longer than the look-up it
# would save); an entry goes when its layout does. Threads may race to fill an entry:
# both compute the same regions.
_region_caches: dict[int, tuple[weakref.ref[VariableLayout], _RegionCache]] = {}


def _region_cache(layout: VariableLayout) -> _RegionCache:
    entry = _region_caches.get(id(layout))
    if entry is not None and entry[0]() is layout:
        return entry[1]
    key = id(layout)
    cache = _RegionCache(layout)
    _region_caches[key] = (weakref.ref(layout, lambda _: _region_caches.pop(key, None)), cache)
    return cache


def _positions(kept: slice | np.ndarray) -> np.ndarray:
    """A kept part of one axis as its positions (a slice's, bounds given)."""
    if isinstance(kept, np.ndarray):
        return kept
    return np.arange(kept.start, kept.stop, kept.step or 1, dtype=np.intp)


@dataclass(frozen=True, eq=False)
class ReadPlan:
    """Everything needed to fetch one block; `assignment` ties it to its (seed, epoch, rank).

    `sample_index` holds the block's anchors; `rows[v][i, j]` is the buffer row of variable
    `v` at `sample_index[i] + offsets[v][j]`; `buffer_rows[v]` is the buffer's length, and
    `segment_starts[v]` the first buffer row of each sample-axis chunk the block reads, in
    increasing order (a *segment*: the rows of one such chunk, contiguous, never more than
    the chunk's length; block memory may place each segment anywhere, `io.reads.block_slots`).
    With patches, sample i is the crop at `origins[i]` and only the grid chunks some crop
    touches are read (the rest of the buffer is never gathered). The samples of unit
    `units[k]` are `unit_starts[k]:unit_starts[k + 1]` (a unit's samples are contiguous,
    which is what lets a pool shuffle give a unit's memory back on its own).
    `reordered[v]` are the picks of a variable whose batch holds their kept positions in
    another order than the buffer (levels asked for out of the stored order, an area's
    columns across the seam: the gather puts them in the batch's order,
    `core.batch_fields`).
    """

    assignment: EpochAssignment
    block_index: int
    units: np.ndarray
    sample_index: np.ndarray
    reads: Mapping[str, tuple[ChunkRead, ...]]
    rows: Mapping[str, np.ndarray]
    offsets: Mapping[str, tuple[int, ...]]
    buffer_rows: Mapping[str, int]
    segment_starts: Mapping[str, np.ndarray]
    spec: SampleSpec | None = None
    patches: PatchSpec | None = None
    origins: np.ndarray | None = None  # (num_samples, axes) crop origins with patches
    unit_starts: np.ndarray | None = None  # (units + 1,) each unit's first sample, then the end
    reordered: Mapping[str, tuple[AxisPick, ...]] = field(default_factory=dict)

    @property
    def num_samples(self) -> int:
        return int(self.sample_index.size)

    @property
    def num_reads(self) -> int:
        return sum(len(r) for r in self.reads.values())


def chunk_rows_read(plan: ReadPlan, layouts: Mapping[str, VariableLayout]) -> tuple[int, int]:
    """Bytes `plan`'s reads decode (each its whole chunk, whatever it keeps) and bytes of
    the sample-axis rows they keep: their ratio is what a grid finer than the chunks
    costs (1 when every chunk is kept whole). Inner picks are not counted as waste here.
    Counted per variable with array operations, not chunk by chunk: the fetch node counts
    every block it delivers, on the main thread (issue 33).

    Args:
        plan: a block's read plan.
        layouts: the variables' layouts, by name.
    """
    decoded = kept = 0
    for name, reads in plan.reads.items():
        if not reads:
            continue
        layout = layouts[name]
        chunks = np.asarray(layout.chunks, dtype=np.int64)
        coords = np.array([read.coords for read in reads], dtype=np.int64)
        first = coords * chunks
        extent = np.minimum(first + chunks, np.asarray(layout.shape, dtype=np.int64)) - first
        row = np.dtype(layout.dtype).itemsize * extent[:, 1:].prod(axis=1)
        valid = extent[:, 0]
        rows = valid.copy()
        cut = [(i, read.rows) for i, read in enumerate(reads) if read.rows is not None]
        if cut:
            where, bounds = zip(*cut, strict=True)
            bounds_array = np.array(bounds, dtype=np.int64)
            rows[list(where)] = bounds_array[:, 1] - bounds_array[:, 0]
        decoded += int((valid * row).sum())
        kept += int((rows * row).sum())
    return decoded, kept


def _first_seen_order(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values in order of first appearance, and each value's position among them."""
    distinct, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return distinct[order], rank[inverse.reshape(-1)]


def _pieces(
    stored: np.ndarray, cells: np.ndarray, chunk: int, num_cells: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pieces steps lie in, on a grid the chunks do not align with: a piece is the
    needed steps of one (chunk, unit cell, run of the store's map), from the first to
    the last (so never longer than the chunk or the unit: `core.unit_grid.slot_rows`).
    Distinct pieces in the order the steps first need them, each step's piece, and each
    piece's chunk, first stored step and stop. Vectorised: one sort over the steps.

    `stored` are the steps as the array stores them, `cells` each one's unit cell on the
    loader's axis, or (cell, run) numbered as one (they differ by a joined store's
    origin, and where the store's map jumps over left-out steps: `core.step_runs`).
    """
    span = num_cells + 1
    keys, position = _first_seen_order((stored // chunk) * span + cells)
    order = np.argsort(position, kind="stable")
    ordered = stored[order]
    starts = np.flatnonzero(np.r_[True, np.diff(position[order]) != 0])
    first = np.minimum.reduceat(ordered, starts) if starts.size else ordered[:0]
    last = np.maximum.reduceat(ordered, starts) if starts.size else ordered[:0]
    return keys // span, position, first, last + 1


def _kept_rows(
    chunk_ids: np.ndarray, first: np.ndarray, stop: np.ndarray, chunk: int, stored_steps: int
) -> list[tuple[int, int] | None]:
    """Each piece's rows of its chunk (counted from the chunk's first row), or None when
    it is the whole chunk."""
    begin = chunk_ids * chunk
    whole = (first == begin) & (stop == np.minimum(begin + chunk, stored_steps))
    return [
        None if w else (a, b)
        for w, a, b in zip(
            whole.tolist(), (first - begin).tolist(), (stop - begin).tolist(), strict=True
        )
    ]


def plan_block(
    samples: AnchorSet | SampleGeometry,
    units: np.ndarray,
    *,
    assignment: EpochAssignment,
    block_index: int,
) -> ReadPlan:
    anchors = samples if isinstance(samples, AnchorSet) else AnchorSet.everything(samples)
    geometry = anchors.geometry
    units = np.asarray(units, dtype=np.int64)
    ids = anchors.unit_samples(units)
    sample_index = ids // anchors.samples_per_anchor
    origins = None
    if anchors.patches is not None:
        origins = anchors.patches.origins(
            anchors.grid,
            assignment.seed,
            assignment.epoch,
            sample_index,
            ids % anchors.samples_per_anchor,
        )
    if anchors.spec is None:
        wanted = {name: (0,) for name in geometry.variables}
    else:
        wanted = anchors.spec.variable_offsets()
    reads: dict[str, tuple[ChunkRead, ...]] = {}
    rows: dict[str, np.ndarray] = {}
    buffer_rows: dict[str, int] = {}
    segment_starts: dict[str, np.ndarray] = {}
    aligned = is_aligned(geometry.variables.values(), geometry.unit_length, geometry.phase)
    runs = 1 + max(len(layout.runs) for layout in geometry.variables.values())
    for name, offsets in wanted.items():
        layout = geometry.variables[name]
        c, stored_steps = layout.sample_chunk, layout.shape[0]
        steps = sample_index[:, None] + np.asarray(offsets, dtype=np.int64)[None, :]
        stored = layout.stored_steps(steps.reshape(-1))  # a joined store's own steps
        if aligned:
            chunk_ids, position = _first_seen_order(stored // c)
            first = chunk_ids * c
            stop = np.minimum((chunk_ids + 1) * c, stored_steps)
            kept: list[tuple[int, int] | None] = [None] * chunk_ids.size
        else:
            cells = geometry.unit_of(steps.reshape(-1)) * runs
            if layout.runs:
                cells += run_index(steps.reshape(-1), layout.runs)
            chunk_ids, position, first, stop = _pieces(stored, cells, c, geometry.num_units * runs)
            kept = _kept_rows(chunk_ids, first, stop, c, stored_steps)
        lengths = stop - first
        dest = np.cumsum(lengths) - lengths
        rows[name] = (dest[position] + stored - first[position]).reshape(steps.shape)
        buffer_rows[name] = int(lengths.sum())
        segment_starts[name] = dest
        if origins is None:
            inner = layout.inner_chunk_grid()
            reads[name] = tuple(
                ChunkRead((chunk, *rest), row, keep)
                for chunk, row, keep in zip(chunk_ids.tolist(), dest.tolist(), kept, strict=True)
                for rest in inner
            )
        else:
            assert anchors.patches is not None
            reads[name] = _patch_reads(
                layout,
                anchors.patches.size,
                origins,
                position.reshape(steps.shape),
                chunk_ids,
                dest,
                kept,
            )
    return ReadPlan(
        assignment=assignment,
        block_index=block_index,
        units=units,
        sample_index=sample_index,
        reads=reads,
        rows=rows,
        offsets=wanted,
        buffer_rows=buffer_rows,
        segment_starts=segment_starts,
        spec=anchors.spec,
        patches=anchors.patches,
        origins=origins,
        unit_starts=np.concatenate([[0], np.cumsum(anchors.unit_sizes(units))]).astype(np.int64),
        reordered={name: picks for name in reads if (picks := geometry.variables[name].reordering)},
    )


def _patch_reads(
    layout: VariableLayout,
    size: tuple[int, ...],
    origins: np.ndarray,
    positions: np.ndarray,
    chunk_ids: np.ndarray,
    dest: np.ndarray,
    kept: list[tuple[int, int] | None],
) -> tuple[ChunkRead, ...]:
    """Each (time chunk, grid chunk) that some sample's crop touches, once; every chunk of
    the axes between time and the grid (levels), which crops do not cut.

    `positions` is (samples, offsets): where each step's time chunk (its piece, on a
    grid the chunks do not align with) sits in `chunk_ids`; `kept` each one's rows.
    """
    ndim, k = len(layout.shape), len(size)
    grid, grid_chunks = layout.sample_shape[-k:], layout.chunks[ndim - k :]
    counts = [-(-g // c) for g, c in zip(layout.shape[ndim - k :], grid_chunks, strict=True)]
    per_grid = math.prod(counts)
    stored_at = []  # an area's rows and columns: the stored position of each grid position
    for axis in range(ndim - k, ndim):
        pick = layout.pick_on(axis)
        stored_at.append(None if pick is None else np.asarray(pick.batch_indices))
    stored_grid = layout.shape[ndim - k :]
    touched = touched_chunks(origins, size, grid_chunks, grid, stored_at, stored_grid)
    pairs = positions[:, :, None] * per_grid + touched[:, None, :]
    used = np.broadcast_to(touched[:, None, :] >= 0, pairs.shape)
    middle = layout.inner_chunk_ranges()[: ndim - 1 - k]
    reads = []
    for pair in np.unique(pairs[used]).tolist():
        position, flat = divmod(pair, per_grid)
        spatial = tuple(int(i) for i in np.unravel_index(flat, counts))
        for rest in itertools.product(*middle):
            reads.append(
                ChunkRead(
                    (int(chunk_ids[position]), *rest, *spatial),
                    int(dest[position]),
                    kept[position],
                )
            )
    return tuple(reads)
