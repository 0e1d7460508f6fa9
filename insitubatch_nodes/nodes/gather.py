"""GatherNode: turns a batch draw into contiguous arrays, one vectorised take per field and
run of blocks sharing an array (per array, in a draw that says its order)."""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import numpy as np
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.batch_fields import (
    PATCH_ORIGIN_KEY,
    SAMPLE_INDEX_KEY,
    batch_fields,
    batch_shape,
    crop_index,
)
from insitubatch_nodes.core.picked_takes import PickedTake, take_picked
from insitubatch_nodes.core.quality import UniformMixing
from insitubatch_nodes.core.settings import as_bool, as_int
from insitubatch_nodes.device.copy_ahead import CUDA_PREFETCH, staging_slots
from insitubatch_nodes.device.staging_ring import StagingRing, page_locked
from insitubatch_nodes.io.reads.decode_pool import DecodePool
from insitubatch_nodes.nodes import state_names
from insitubatch_nodes.nodes.batch_mixing import BatchMixing
from insitubatch_nodes.nodes.helped_takes import HelpedTakes
from insitubatch_nodes.nodes.items import Batch, BatchDraw, FetchedBlock
from insitubatch_nodes.nodes.reused_buffers import ReusedBuffers
from insitubatch_nodes.nodes.state_checks import named_state, source_part
from insitubatch_nodes.nodes.state_views import state_reader
from insitubatch_nodes.nodes.tensor_gather import gather_tensors

IDLE_BATCHES = 2  # dropped batches whose memory is kept for the next ones

Shapes = dict[str, tuple[tuple[int, ...], np.dtype]]


class GatherNode(BaseNode[Batch]):
    """Yields `Batch({variable: (batch, *sample_shape) array, "sample_index": int64
    (batch,)})`, or with a sample spec `{"group/variable": (batch, steps, *sample_shape),
    ...}` (the sample index is then the anchor's).

    Work is one fancy index per block the batch draws from, into the block's index table
    (its plan's (anchor, offset) -> row map, translated once per block into the rows of
    its arrays), and one `np.take` per field and run of neighbouring blocks whose rows lie
    in one array (the backing array block slots share: one run for a pool batch; a batch
    in an interleaved order, `BatchDraw.order`, takes and scatters once per array): it
    never scales with the batch's samples, nor with its blocks times its fields (see
    `gather`). `mode="clip"`: the rows come from a
    permutation of the block, always in range, and numpy's default `mode="raise"` copies
    through a temporary buffer (about 3x slower here). Blocks decoded on a device
    (`FetchedBlock.device`) hold tensors there: the batch is gathered there too
    (`gather_tensors`) and says so (`Batch.device`); only `sample_index` (and
    `patch_origin`) stay host arrays.

    With `pin_memory`, host batches are gathered into a ring of page-locked buffers that
    this node owns, every array but `sample_index` in one buffer, and each batch carries
    its slot (`Batch.staged`): `PinToDeviceNode` then copies the slot's bytes to the GPU
    in one transfer, and nothing is copied twice. The gather owns the memory, rather than
    the device node lending it, so that a graph composed by hand gets it by saying so
    here, as `DataLoader(pin_memory=True)` does, with nothing wired between nodes; and a
    slot is never written while anything still views it (`device.staging_ring`), so a
    graph that keeps batches, or copies none, stays correct. Before a
    `StackChannelsNode`, pin its output instead: that is what crosses.

    Args:
        source: the batch draws (`ShuffleBlockNode`).
        pin_memory: gather host batches into page-locked memory (True or False): for a
            `PinToDeviceNode` on a CUDA device. Without CUDA the ring is plain memory.
        pinned_batches: page-locked batches the ring holds (an int >= 1): one per batch
            between its gather and the end of its device copy, that is the device node's
            `prefetch` + 1 (fewer makes the gather wait for copies).
        uniform_mixing: what a uniform global shuffle of the split gives (called once,
            when figures are first asked for), or None to keep no mixing figures (an
            evaluation loader's batches are in order by design). With it, every batch's
            draw is handed to `mixing` (`nodes.batch_mixing`, O(batch) numpy work).
        copy_pool: the decode pool of the fetch node upstream (`ReadContext.decode_pool`,
            what `build_loader` passes), whose idle threads help copy host batches
            (`nodes.helped_takes`); the node holds it from its first batch to the end of
            the epoch (`close()`, a reset, or its source's end), so its threads outlive
            the fetch loop's last read. None: batches are copied in the calling thread.
    """

    STATE_NAME = state_names.GATHER
    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[BatchDraw],
        *,
        pin_memory: bool = False,
        pinned_batches: int = staging_slots(CUDA_PREFETCH),
        uniform_mixing: Callable[[], UniformMixing] | None = None,
        copy_pool: DecodePool | None = None,
    ) -> None:
        super().__init__()
        pin_memory = as_bool("pin_memory", pin_memory)
        pinned_batches = as_int("pinned_batches", pinned_batches, minimum=1)
        self.source = source
        self._read_source_state = state_reader(source)  # kept states: no copy per pull
        self.staging = StagingRing(pinned_batches, page_locked) if pin_memory else None
        self._buffers = ReusedBuffers(max_idle_bytes=0)
        self._tables: weakref.WeakKeyDictionary[FetchedBlock, np.ndarray] = (
            weakref.WeakKeyDictionary()
        )  # each live block's index table (`gather`)
        self._gather_s = 0.0  # this epoch's time in the gather
        self.mixing = None if uniform_mixing is None else BatchMixing(uniform_mixing)
        self.copy_pool = copy_pool
        self._takes = HelpedTakes(None, 0)  # the pool's help, while this node holds it
        self._holding: weakref.finalize | None = None  # releases the pool once
        self.copy_pieces = self.helped_pieces = 0  # this epoch's (`copy_shares`)

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.close()
        self.source.reset(source_part(self, initial_state, self.SOURCE_KEY))
        self._gather_s = 0.0
        self.copy_pieces = self.helped_pieces = 0
        if self.mixing is not None:
            self.mixing.restart()

    def next(self) -> Batch:
        try:
            draw = next(self.source)
        except StopIteration:
            self.close()  # the epoch's last batch is out: the pool's threads may stop
            raise
        started = time.perf_counter()
        try:
            return self._gathered(draw)
        finally:
            self._gather_s += time.perf_counter() - started

    def mixing_figures(self) -> dict[str, float]:
        """This epoch's mixing so far against a uniform global shuffle's
        (`BatchMixing.figures`), or nothing without `uniform_mixing`: what the `Loader`
        reads through its link (`nodes.links.MixingReport`)."""
        return {} if self.mixing is None else self.mixing.figures()

    def _gathered(self, draw: BatchDraw) -> Batch:
        device = draw.parts[0][0].device
        if device is not None:
            if self.mixing is not None:
                self.mixing.count(draw)
            return Batch(gather_tensors(draw), device=device)
        shapes = batch_shapes(draw)
        units = None if self.mixing is None else np.empty(draw.size, dtype=np.int64)
        if self.copy_pool is not None and self._holding is None:
            executor = self.copy_pool.acquire()
            self._holding = weakref.finalize(self, self.copy_pool.release)
            self._takes = HelpedTakes(executor, self.copy_pool.threads, board=self.copy_pool.board)
        staged = None if self.staging is None else self.staging.stage(shapes)
        out = self._recycled(shapes) if staged is None else staged.arrays
        batch = gather(draw, out, self._tables, self._takes, units)
        if self.mixing is not None:
            assert units is not None
            self.mixing.count_samples(batch[SAMPLE_INDEX_KEY], units)
        return Batch(batch, staged=staged)

    def close(self) -> None:
        """Stop holding the decode pool (`copy_pool`), so that its threads stop once the
        fetch loop is done with them too; the next batch takes it again. Safe to call at
        any time, any number of times."""
        holding, self._holding = self._holding, None
        self._count_pieces()
        self._takes = HelpedTakes(None, 0)
        if holding is not None:
            holding()

    def _count_pieces(self) -> None:
        self.copy_pieces += self._takes.pieces
        self.helped_pieces += self._takes.helped_pieces
        self._takes.pieces = self._takes.helped_pieces = 0

    def copy_shares(self) -> tuple[int, int]:
        """This epoch's copies into batches so far: pieces copied, and how many of them
        the decode threads copied (`nodes.helped_takes`; a benchmark's figure)."""
        self._count_pieces()
        return self.copy_pieces, self.helped_pieces

    def stage_counters(self) -> dict[str, Any]:
        """This epoch's gather time so far (what `Loader.stats()` reports as `gather_s`;
        on a device, the time to queue the gathers)."""
        return {"gather_s": self._gather_s}

    def _recycled(self, shapes: Shapes) -> dict[str, np.ndarray]:
        """Batch arrays in the memory of batches the consumer has dropped (a fresh batch of
        megabytes page-faults on first touch, a cost as large as the gather's copy)."""
        nbytes = sum(
            math.prod(shape) * np.dtype(dtype).itemsize for shape, dtype in shapes.values()
        )
        self._buffers.max_idle_bytes = IDLE_BATCHES * nbytes
        return {
            key: self._buffers.empty(shape, np.dtype(dtype))
            for key, (shape, dtype) in shapes.items()
        }

    def get_state(self) -> dict[str, Any]:
        return named_state(self, {self.SOURCE_KEY: self.source.state_dict()})

    def state_view(self) -> dict[str, Any]:
        """The state without a copy, for a node downstream to keep unchanged
        (`nodes.state_views`)."""
        return named_state(self, {self.SOURCE_KEY: self._read_source_state()})


def batch_shapes(draw: BatchDraw) -> Shapes:
    """The `(shape, dtype)` of every array of the draw's host batch but `sample_index`
    (one int64 array that stays on the host, so it is not staged with the rest).

    Args:
        draw: the batch's rows, by block.
    """
    first_block = draw.parts[0][0]
    plan = first_block.plan
    crop = () if plan.patches is None else plan.patches.size
    shapes: Shapes = {}
    for key, variable, columns in batch_fields(plan):
        array = first_block.arrays[variable]
        picks = plan.reordered.get(variable, ())
        shapes[key] = (batch_shape(draw.size, array.shape, columns, crop, picks), array.dtype)
    if crop:
        shapes[PATCH_ORIGIN_KEY] = ((draw.size, len(crop)), np.dtype(np.int64))
    return shapes


def gather(
    draw: BatchDraw,
    out: Mapping[str, np.ndarray],
    tables: MutableMapping[FetchedBlock, np.ndarray] | None = None,
    takes: HelpedTakes | None = None,
    units: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """The draw's batch, written into `out` (arrays of `batch_shapes(draw)`), with its
    `sample_index`.

    A pool batch draws from tens of blocks, and the per-block work (a fancy index into
    the plan's row table, a search for the rows' slots, a take per field) was most of the
    gather's Python time on the producer thread, where it holds the GIL against the
    training loop. So each block's rows are translated once, into its index table
    (`_index_table`, kept in `tables` while the block lives); a batch takes one row of it
    per sample (one fancy index per block), and copies each field with one `np.take` per
    run of neighbouring blocks whose rows lie in the same array: blocks leased from block
    slots share their variable's backing array (`io.reads.block_slots`), so a pool batch takes
    one per field. The runs keep the batch's order: the bytes are those of a take per
    block.

    A draw that says its order (`BatchDraw.order`, an interleaved pool batch) permutes the
    index table's rows, so one array's rows are no longer a run of the batch: each array
    the batch draws from is then taken once, its rows scattered into the batch rows they
    land on (`_array_groups`): still one take per field when every part shares one backing
    array, and work that scales with the distinct arrays, not the samples, when not. The
    bytes are those of a take per sample in that order.

    Positions asked for in another order than the store's (`ReadPlan.reordered`: levels,
    an area's columns across the seam) come out of the same take: it reads the block as
    rows of what lies after the reordered axes, at the rows that list each sample's
    positions in the batch's order (`core.picked_takes`).

    Args:
        draw: the batch's rows, by block.
        out: the arrays to write the batch into.
        tables: each block's index table, kept between calls (a
            `weakref.WeakKeyDictionary`, so that a table goes with its block), or None to
            make them for this batch only.
        takes: how the fields' rows are copied where one run of the batch's rows holds
            them: all of the batch's such takes at once, with the decode threads' help
            (`nodes.helped_takes`), or None for plain takes in the calling thread.
        units: an int64 array of the batch's size to write the unit each sample lies in
            (what the mixing tally counts, `nodes.batch_mixing`; read off the index table
            with the sample ids), or None.
    """
    first_block = draw.parts[0][0]
    plan = first_block.plan
    layout = _TableLayout(batch_fields(plan), () if plan.patches is None else plan.patches.size)
    if tables is None:
        tables = {}
    if takes is None:
        takes = HelpedTakes(None, 0)
    picked = [_table(block, layout, tables)[rows] for block, rows in draw.parts]
    index = picked[0] if len(picked) == 1 else np.concatenate(picked)  # (batch, columns)
    if draw.order is not None:
        index = index[draw.order]
    batch = {**out, SAMPLE_INDEX_KEY: np.empty(draw.size, dtype=np.int64)}
    due: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # runs' takes, copied together
    groups: dict[str, list[tuple[Any, slice | np.ndarray]]] = {}
    for key, variable, columns, take_columns in layout.fields:
        if variable not in groups:
            groups[variable] = _array_groups(draw, variable)
        picks = plan.reordered.get(variable, ())
        for array, at in groups[variable]:
            take = PickedTake(array.shape, picks, layout.crop) if picks else None
            if layout.crop:
                rows, origins = index[at, columns], index[at, layout.origins]
                source, lookups = array, ()
                if take is not None:
                    source, rows, lookups = take.view(array), take.rows(rows), take.crop_lookups()
                rows = rows.reshape(len(origins), -1)
                taken = crop_rows(source, rows, origins, layout.crop, lookups)
                batch[key][at] = taken.reshape(len(origins), *batch[key].shape[1:])
            elif take is not None and isinstance(at, slice):  # in another order than the block's
                rows = index[at, take_columns]
                if take.columns is None:  # rows of the take's view, helped as any take
                    due.append((take.view(array), take.rows(rows), batch[key][at]))
                else:
                    take_picked(array, rows, take, out=batch[key][at])
            elif take is not None:
                batch[key][at] = take_picked(array, index[at, take_columns], take)
            elif isinstance(at, slice):  # (n,), or (n, steps) with steps
                due.append((array, index[at, take_columns], batch[key][at]))
            else:  # one array's rows, scattered over the batch by the draw's order
                batch[key][at] = np.take(array, index[at, take_columns], axis=0, mode="clip")
    takes.take_all(due)
    batch[SAMPLE_INDEX_KEY][...] = index[:, layout.sample_index]
    if units is not None:
        units[...] = index[:, layout.unit]
    if layout.crop:
        batch[PATCH_ORIGIN_KEY][...] = index[:, layout.origins]
    return batch


class _TableLayout:
    """Which columns of a block's index table hold what (`_index_table`): each field's
    array rows (`fields`: key, variable, its columns, and them as a take indexes them:
    one column without a steps axis), the sample id, the unit it lies in, the crop
    origin."""

    def __init__(
        self, fields: list[tuple[str, str, np.ndarray | None]], crop: tuple[int, ...]
    ) -> None:
        self.fields: list[tuple[str, str, slice, slice | int]] = []
        width = 0
        for key, variable, columns in fields:
            steps = 1 if columns is None else columns.size
            at = slice(width, width + steps)
            self.fields.append((key, variable, at, width if columns is None else at))
            width += steps
        self.sample_index = width
        self.unit = width + 1
        self.origins = slice(width + 2, width + 2 + len(crop))
        self.crop = crop
        self.width = width + 2 + len(crop)


def _index_table(block: FetchedBlock) -> np.ndarray:
    """(samples, columns) int64, a row per sample of the block: the rows of the block's
    arrays holding each field's steps (`batch_fields` order, one column per step, one for a
    field without steps), then the sample id and the unit it lies in (the plan's unit, or
    the block's index for a plan without units), then with patches the crop origin.

    Made once per block, in a few vectorised passes over its plan: a batch then takes its
    samples' rows of it with one fancy index, however many fields and slots they span.

    Args:
        block: a fetched block on the host.
    """
    plan = block.plan
    crop = () if plan.patches is None else plan.patches.size
    fields = batch_fields(plan)
    layout = _TableLayout(fields, crop)
    table = np.empty((plan.num_samples, layout.width), dtype=np.int64)
    mapped: dict[str, np.ndarray] = {}
    for (_, variable, columns), (_, _, at, _) in zip(fields, layout.fields, strict=True):
        if variable not in mapped:
            mapped[variable] = block.rows(variable, plan.rows[variable])
        rows = mapped[variable]
        table[:, at] = rows[:, :1] if columns is None else rows[:, columns]
    table[:, layout.sample_index] = plan.sample_index
    if plan.unit_starts is None:
        table[:, layout.unit] = plan.block_index
    else:
        table[:, layout.unit] = np.repeat(plan.units, np.diff(plan.unit_starts))
    if crop:
        assert plan.origins is not None
        table[:, layout.origins] = plan.origins
    return table


def _table(
    block: FetchedBlock, layout: _TableLayout, tables: MutableMapping[FetchedBlock, np.ndarray]
) -> np.ndarray:
    """The block's index table, made at its first batch."""
    table = tables.get(block)
    if table is None:
        table = tables[block] = _index_table(block)
    assert table.shape[1] == layout.width, "every block of a batch has the same fields"
    return table


def _array_groups(draw: BatchDraw, variable: str) -> list[tuple[Any, slice | np.ndarray]]:
    """Each array holding the draw's rows of `variable`, with the batch rows that come
    from it: in parts' order, runs of neighbouring parts whose rows lie in one array
    (`block.arrays[variable]` the same object), as slices; in a draw's own order
    (`BatchDraw.order`), the whole batch when one array holds every row, else each
    distinct array once with the batch rows it lands on (one vectorised pass, not a
    step per sample)."""
    runs: list[tuple[Any, slice]] = []
    start = 0
    for block, rows in draw.parts:
        array = block.arrays[variable]
        stop = start + rows.size
        if runs and runs[-1][0] is array:
            runs[-1] = (array, slice(runs[-1][1].start, stop))
        else:
            runs.append((array, slice(start, stop)))
        start = stop
    if draw.order is None or len(runs) == 1:
        return runs
    numbers: dict[int, int] = {}  # id of each distinct array -> its number
    arrays: list[Any] = []
    which = np.empty(start, dtype=np.int64)  # the array of each row, in parts' order
    for array, at in runs:
        number = numbers.setdefault(id(array), len(arrays))
        if number == len(arrays):
            arrays.append(array)
        which[at] = number
    if len(arrays) == 1:
        return [(arrays[0], slice(0, start))]
    landed = which[draw.order]
    return [(array, np.flatnonzero(landed == i)) for i, array in enumerate(arrays)]


def crop_rows(
    array: np.ndarray,
    rows: np.ndarray,
    origins: np.ndarray,
    size: tuple[int, ...],
    lookups: tuple[np.ndarray | None, ...] = (),
) -> np.ndarray:
    """`array[rows[i, j], ..., o_i : o_i + size]` for all i, j as one fancy index:
    (n, steps, *middle, *size).

    Args:
        array: the block buffer.
        rows: (n, steps) block rows of the samples' steps.
        origins: (n, len(size)) each sample's crop origin.
        size: the crop's length along each cropped (last) axis.
        lookups: per cropped axis, the block positions of the batch's positions, or None
            (`core.picked_takes.PickedTake.crop_lookups`).
    """
    index, middle = crop_index(rows, origins, size, array.ndim, np.arange, lookups)
    taken = array[index]  # advanced axes first: (n, steps, *size, *middle)
    if middle:
        k = len(size)
        taken = np.moveaxis(taken, list(range(2 + k, 2 + k + middle)), list(range(2, 2 + middle)))
    return taken
