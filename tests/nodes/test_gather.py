"""The host gather: one take per field and run of blocks sharing an array gives the batch a
take per sample would, on draws over shared backing arrays (block slots) and blocks with
buffers of their own, with sample specs, fine grids, revisits and patches; a draw in its
own order (an interleaved pool batch) too, with one take per distinct array; levels in an
order of their own (asked for out of the stored order) in the same takes; and the device
gather (on CPU tensors) gives the same batches."""

from __future__ import annotations

import concurrent.futures
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.axis_pick import AxisPick
from insitubatch_nodes.core.batch_fields import PATCH_ORIGIN_KEY, SAMPLE_INDEX_KEY
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.patches import PatchSpec
from insitubatch_nodes.core.read_plan import plan_block
from insitubatch_nodes.core.sample_spec import SampleSpec, VariableGroup
from insitubatch_nodes.io.reads.block_slots import BlockMemory, BlockSlots
from insitubatch_nodes.nodes.batch_mixing import draw_samples_and_units
from insitubatch_nodes.nodes.gather import batch_shapes, gather
from insitubatch_nodes.nodes.helped_takes import HelpedTakes
from insitubatch_nodes.nodes.items import BatchDraw, FetchedBlock
from insitubatch_nodes.nodes.tensor_gather import gather_tensors
from tests.helpers.profiles import examples


@st.composite
def _level_picks(draw: st.DrawFn, levels: int) -> AxisPick:
    """Some positions of a level axis, sorted as a block holds them, in an order of the
    batch's own (`AxisPick.order`: the order asked for, a level sometimes twice)."""
    kept = sorted(draw(st.sets(st.integers(0, levels - 1), min_size=1)))
    places = list(draw(st.permutations(range(len(kept)))))
    places += draw(st.lists(st.integers(0, len(kept) - 1), max_size=2))
    places = draw(st.permutations(places))
    return AxisPick(1, tuple(kept), order=tuple(places))


@st.composite
def _area(draw: st.DrawFn, grid: tuple[int, ...]) -> list[tuple[int, ...] | None]:
    """Per grid axis, the positions an area keeps (sorted, as a block holds them) and
    their order in the batch (each once: an area's columns across the seam), or None."""
    area: list[tuple[int, ...] | None] = []
    for length in grid:
        area.append(
            tuple(sorted(draw(st.sets(st.integers(0, length - 1), min_size=1))))
            if draw(st.booleans())
            else None
        )
    return area


def _area_picks(draw: st.DrawFn, area: list[tuple[int, ...] | None], first: int) -> list[AxisPick]:
    picks = []
    for i, kept in enumerate(area):
        if kept is not None:
            places = tuple(draw(st.permutations(range(len(kept)))))
            picks.append(AxisPick(first + i, kept, order=places))
    return picks


@st.composite
def _anchor_sets(draw: st.DrawFn) -> AnchorSet:
    """Variables on one grid (some with a levels axis before it, some of those keeping some
    levels in an order of their own), on their chunks' unit grid or a fine one, visited
    once or more, with or without a spec and patches."""
    n = draw(st.integers(2, 60))
    grid = tuple(draw(st.lists(st.integers(1, 6), max_size=2)))
    area = draw(_area(grid))  # one for every variable: they share the grid patches crop
    layouts = {}
    for i in range(draw(st.integers(1, 3))):
        levels = (draw(st.integers(1, 4)),) if grid and draw(st.booleans()) else ()
        shape = (n, *levels, *grid)
        chunks = (draw(st.integers(1, 9)), *(draw(st.integers(1, s)) for s in shape[1:]))
        dtype = draw(st.sampled_from(["float32", "int16", "float64"]))
        picks = [draw(_level_picks(levels[0]))] if levels and draw(st.booleans()) else []
        picks += _area_picks(draw, area, len(levels) + 1)
        layouts[f"v{i}"] = VariableLayout(shape, chunks, dtype, tuple(picks))
    finest = min(layout.sample_chunk for layout in layouts.values())
    geometry = SampleGeometry.from_layouts(layouts, finest if draw(st.booleans()) else None)
    length = geometry.unit_length
    revisits = draw(st.sampled_from([k for k in range(1, 4) if length % k == 0]))
    geometry = geometry.visits(revisits)
    spec = None
    if draw(st.booleans()):
        names = list(layouts)
        groups = {}
        for group in ("a", "b")[: draw(st.integers(1, 2))]:
            chosen = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
            offsets = draw(st.lists(st.integers(-3, 3), min_size=1, max_size=3, unique=True))
            groups[group] = VariableGroup(tuple(chosen), tuple(offsets))  # any order
        spec = SampleSpec(groups)
    patches = None
    if grid and draw(st.booleans()):
        kept_grid = [g if a is None else len(a) for g, a in zip(grid, area, strict=True)]
        size = tuple(draw(st.integers(1, g)) for g in kept_grid)
        patches = PatchSpec(size, draw(st.sampled_from(["random", "tiles"])))
    return AnchorSet.for_split(geometry, np.arange(geometry.num_units), spec, patches)


def _blocks(
    anchors: AnchorSet, block_units: int, slot_samples: int | None, seed: int
) -> list[FetchedBlock]:
    """The epoch's blocks of `block_units` units, in slots for `slot_samples` samples
    (shared backing arrays; blocks beyond them get buffers of their own) or, with None,
    each in buffers of its own; every array filled with random values."""
    geometry = anchors.geometry
    layouts = geometry.variables
    assignment = assign_epoch(anchors, anchors.units, seed=seed, epoch=0, rank=0, world_size=1)
    units = assignment.units
    slots = None
    if slot_samples is not None:
        sample_bytes = sum(
            int(np.prod(layout.sample_shape)) * np.dtype(layout.dtype).itemsize
            for layout in layouts.values()
        )
        slots = BlockSlots(layouts, slot_samples * sample_bytes, geometry.unit_length)
    blocks = []
    for index, first in enumerate(range(0, units.size, block_units)):
        plan = plan_block(
            anchors, units[first : first + block_units], assignment=assignment, block_index=index
        )
        if not plan.num_samples:
            continue
        if slots is None:
            blocks.append(FetchedBlock(plan, BlockMemory.own(plan, layouts).arrays))
        else:
            memory = slots.lease(plan)
            blocks.append(FetchedBlock(plan, memory.arrays, None, memory))
    rng = np.random.default_rng(seed)
    filled: set[int] = set()
    for block in blocks:
        for array in block.arrays.values():
            if id(array) not in filled:
                filled.add(id(array))
                array[...] = rng.integers(-30_000, 30_000, array.shape).astype(array.dtype)
    return blocks


def _reference(
    draw: BatchDraw, layouts: Mapping[str, VariableLayout] | None = None
) -> dict[str, np.ndarray]:
    """The batch a sample at a time: each step's row of the block's buffer in the plan's
    layout (`FetchedBlock.buffer`), its picked levels in the order `layouts` ask for,
    cropped at the sample's origin, in the draw's order."""
    first = draw.parts[0][0].plan
    places = {
        name: [(pick.axis - 1, list(pick.places)) for pick in layout.picks]
        for name, layout in (layouts or {}).items()
    }
    if first.spec is None:
        fields = [(name, name, (0,), False) for name in first.reads]
    else:
        fields = [(key, v, offsets, True) for key, _, v, offsets in first.spec.fields()]
    batch: dict[str, list[Any]] = {key: [] for key, *_ in fields}
    batch[SAMPLE_INDEX_KEY] = []
    batch[PATCH_ORIGIN_KEY] = []
    for block, rows in draw.parts:
        plan = block.plan
        buffers = {variable: block.buffer(variable) for variable in plan.reads}
        for i in rows.tolist():
            crop: tuple[Any, ...] = ()
            if plan.patches is not None:
                assert plan.origins is not None
                origin = plan.origins[i].tolist()
                size = plan.patches.size
                crop = tuple(slice(o, o + s) for o, s in zip(origin, size, strict=True))
                batch[PATCH_ORIGIN_KEY].append(origin)
            for key, variable, offsets, stepped in fields:
                steps = []
                for offset in offsets:
                    row = plan.rows[variable][i, plan.offsets[variable].index(offset)]
                    sample = buffers[variable][row]
                    for axis, order in places.get(variable, []):
                        sample = np.take(sample, order, axis=axis)
                    steps.append(sample[(..., *crop)])
                batch[key].append(np.stack(steps) if stepped else steps[0])
            batch[SAMPLE_INDEX_KEY].append(int(plan.sample_index[i]))
    if first.patches is None:
        del batch[PATCH_ORIGIN_KEY]
    order = slice(None) if draw.order is None else draw.order
    return {key: np.array(values)[order] for key, values in batch.items()}


def _gathered(
    draw: BatchDraw,
    tables: Any,
    takes: HelpedTakes | None = None,
    units: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    out = {}
    for key, (shape, dtype) in batch_shapes(draw).items():
        out[key] = np.empty(shape, dtype=dtype)
        out[key].view(np.uint8)[...] = 0xA5  # any byte the gather leaves is seen
    return gather(draw, out, tables, takes, units)


_HELPERS = concurrent.futures.ThreadPoolExecutor(3, thread_name_prefix="test-gather-helpers")


def _assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for key, array in want.items():
        assert (got[key].dtype, got[key].shape) == (array.dtype, array.shape), key
        assert got[key].tobytes() == array.tobytes(), key


@settings(max_examples=examples(200), deadline=None)
@given(
    anchors=_anchor_sets(),
    block_units=st.integers(1, 3),
    slot_samples=st.one_of(st.none(), st.integers(0, 120)),
    seed=st.integers(0, 2**16),
    parts=st.lists(
        st.lists(st.tuples(st.integers(0, 1_000), st.integers(1, 6)), min_size=1, max_size=12),
        min_size=1,
        max_size=3,
    ),
    ordered=st.booleans(),
)
def test_the_gather_is_the_batch_a_sample_at_a_time(
    anchors: AnchorSet,
    block_units: int,
    slot_samples: int | None,
    seed: int,
    parts: list[list[tuple[int, int]]],
    ordered: bool,
) -> None:
    """Draws of random rows from random blocks, neighbours often sharing a backing array,
    in the parts' order or a random one of their own: each batch is the reference's, byte
    for byte, with index tables made for the batch or kept across batches (the gather
    node's way), with every take in pieces other threads help with, and so are its sample
    ids as the mixing tally counts them."""
    assume(anchors.anchors.size > 0)
    blocks = _blocks(anchors, block_units, slot_samples, seed)
    assume(blocks)
    rng = np.random.default_rng(seed)
    tables: weakref.WeakKeyDictionary[FetchedBlock, np.ndarray] = weakref.WeakKeyDictionary()
    for batch_parts in parts:  # batches in a row, the later ones reusing the tables
        chosen = [blocks[b % len(blocks)] for b, _ in batch_parts]
        counts = [count for _, count in batch_parts]
        draw = BatchDraw(
            tuple(
                (block, rng.integers(0, block.plan.num_samples, count))
                for block, count in zip(chosen, counts, strict=True)
            ),
            order=rng.permutation(sum(counts)) if ordered else None,
        )
        want = _reference(draw, anchors.geometry.variables)
        _assert_same(_gathered(draw, tables), want)
        _assert_same(_gathered(draw, None), want)
        helped = HelpedTakes(_HELPERS, 3, min_piece_bytes=1)  # every take in pieces
        _assert_same(_gathered(draw, tables, helped), want)
        samples, units = draw_samples_and_units(draw)
        assert np.array_equal(samples, want[SAMPLE_INDEX_KEY])
        read_off = np.full(draw.size, -1, dtype=np.int64)
        _gathered(draw, tables, units=read_off)
        assert np.array_equal(read_off, units), "the units the mixing tally counts"


def _counted_takes(monkeypatch: pytest.MonkeyPatch, draw: BatchDraw) -> tuple[Any, list[int]]:
    """The draw's host batch, and the rows of each `np.take` that made it."""
    taken: list[int] = []
    take = np.take

    def counted(array: Any, rows: Any, *args: Any, **kwargs: Any) -> Any:
        taken.append(len(rows))
        return take(array, rows, *args, **kwargs)

    monkeypatch.setattr(np, "take", counted)
    got = _gathered(draw, None)
    monkeypatch.undo()
    return got, taken


def test_neighbours_in_one_backing_array_take_together_and_others_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two blocks in slots, then one with buffers of its own, then a slotted one again: the
    slotted neighbours are one take, the own block breaks the run (three takes for the
    one field), and the batch is the reference's."""
    layout = VariableLayout((24, 3), (4, 3), "float32")
    geometry = SampleGeometry.from_layouts({"v": layout})
    anchors = AnchorSet.for_split(geometry, np.arange(geometry.num_units))
    slotted = _blocks(anchors, 1, 24, seed=1)
    own = _blocks(anchors, 1, None, seed=2)
    assert slotted[0].arrays["v"] is slotted[1].arrays["v"] is slotted[3].arrays["v"]
    draw = BatchDraw(
        (
            (slotted[0], np.array([3, 0])),
            (slotted[1], np.array([1])),
            (own[2], np.array([2, 2])),
            (slotted[3], np.array([0])),
        )
    )
    got, taken = _counted_takes(monkeypatch, draw)
    assert taken == [3, 2, 1]
    _assert_same(got, _reference(draw))


def test_an_interleaved_draw_takes_once_per_distinct_array(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The draw of the test above, interleaved: the slotted blocks' rows are no longer
    neighbours in the batch, yet their shared array is taken once (its rows scattered
    where they land) and the own block's once; a draw wholly in slots is one take. The
    bytes are a take per sample's in the draw's order."""
    layout = VariableLayout((24, 3), (4, 3), "float32")
    geometry = SampleGeometry.from_layouts({"v": layout})
    anchors = AnchorSet.for_split(geometry, np.arange(geometry.num_units))
    slotted = _blocks(anchors, 1, 24, seed=1)
    own = _blocks(anchors, 1, None, seed=2)
    parts = (
        (slotted[0], np.array([3, 0])),
        (slotted[1], np.array([1])),
        (own[2], np.array([2, 2])),
        (slotted[3], np.array([0])),
    )
    order = np.array([5, 2, 0, 3, 1, 4])  # the own block's rows apart, slotted between
    draw = BatchDraw(parts, order=order)
    got, taken = _counted_takes(monkeypatch, draw)
    assert sorted(taken) == [2, 4]
    _assert_same(got, _reference(draw))
    unordered = _reference(BatchDraw(parts))
    assert all(np.array_equal(_reference(draw)[k], v[order]) for k, v in unordered.items())
    in_slots = BatchDraw(parts[:2] + parts[3:], order=np.array([3, 0, 2, 1]))
    got, taken = _counted_takes(monkeypatch, in_slots)
    assert taken == [4]
    _assert_same(got, _reference(in_slots))


def test_levels_in_an_order_of_their_own_are_the_same_one_take(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Levels kept sorted in the blocks (1, 2, 3 of 4) and asked for as 3, 1, 2, 3: the
    batch holds them so, and reordering them costs no take of its own (the runs' takes of
    the test above, one per run of a shared array)."""
    pick = AxisPick(1, (1, 2, 3), order=(2, 0, 1, 2))
    layout = VariableLayout((24, 4, 3), (4, 2, 3), "float32", (pick,))
    geometry = SampleGeometry.from_layouts({"v": layout})
    anchors = AnchorSet.for_split(geometry, np.arange(geometry.num_units))
    slotted = _blocks(anchors, 1, 24, seed=1)
    own = _blocks(anchors, 1, None, seed=2)
    draw = BatchDraw(
        (
            (slotted[0], np.array([3, 0])),
            (slotted[1], np.array([1])),
            (own[2], np.array([2, 2])),
        )
    )
    got, taken = _counted_takes(monkeypatch, draw)
    assert taken == [3, 2]
    assert got["v"].shape == (5, 4, 3)
    _assert_same(got, _reference(draw, geometry.variables))
    in_blocks = _reference(draw)["v"]  # the blocks' own (sorted) order
    np.testing.assert_array_equal(got["v"], in_blocks[:, [2, 0, 1, 2]])


def _on_tensors(block: FetchedBlock) -> FetchedBlock:
    """The block as the device reader hands it over, its arrays CPU tensors."""
    arrays = {k: torch.from_numpy(v) for k, v in block.arrays.items()}
    return FetchedBlock(block.plan, arrays, torch.device("cpu"), block.memory)


@settings(max_examples=60, deadline=None)
@given(
    anchors=_anchor_sets(),
    block_units=st.integers(1, 3),
    slot_samples=st.one_of(st.none(), st.integers(0, 120)),
    seed=st.integers(0, 2**16),
    counts=st.lists(st.tuples(st.integers(0, 1_000), st.integers(1, 6)), min_size=1, max_size=8),
    ordered=st.booleans(),
)
def test_the_device_gather_is_the_host_batch_in_the_draws_order(
    anchors: AnchorSet,
    block_units: int,
    slot_samples: int | None,
    seed: int,
    counts: list[tuple[int, int]],
    ordered: bool,
) -> None:
    """`gather_tensors` on blocks of CPU tensors gives the reference batch, in the draw's
    order when it has one, `sample_index` and `patch_origin` as host arrays."""
    assume(anchors.anchors.size > 0)
    blocks = _blocks(anchors, block_units, slot_samples, seed)
    assume(blocks)
    rng = np.random.default_rng(seed)
    parts = tuple(
        (blocks[b % len(blocks)], rng.integers(0, blocks[b % len(blocks)].plan.num_samples, n))
        for b, n in counts
    )
    order = rng.permutation(sum(n for _, n in counts)) if ordered else None
    want = _reference(BatchDraw(parts, order=order), anchors.geometry.variables)
    on_device = BatchDraw(tuple((_on_tensors(b), rows) for b, rows in parts), order=order)
    got = gather_tensors(on_device)
    assert isinstance(got[SAMPLE_INDEX_KEY], np.ndarray)
    _assert_same({k: np.asarray(v) for k, v in got.items()}, want)
