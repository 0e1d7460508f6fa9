"""Keeping part of a chunk: picked positions of an inner axis (levels), row ranges.
(Whole blocks of picked layouts: test_core_geometry's chunk_regions property.)

Both readers decode such a chunk whole into bounded scratch and keep only its part, so a
block holds only what samples use, and the memory beyond it is a chunk per decode thread,
never a full-size buffer per block.
"""

from __future__ import annotations

import asyncio
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.axis_pick import AxisPick
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.patches import PatchSpec
from insitubatch_nodes.core.read_plan import ChunkRead, ReadPlan, chunk_regions, plan_block
from insitubatch_nodes.device import device_decoder
from insitubatch_nodes.device.device_block_reader import DeviceBlockReader
from insitubatch_nodes.device.gpu_codecs import load_nvcomp
from insitubatch_nodes.io.reads.block_reader import ReadContext
from insitubatch_nodes.io.reads.chunk_reader import ChunkReader
from tests.helpers.profiles import examples
from tests.helpers.strategies import layouts, stored_chunk


def _picked(values: np.ndarray, layout: VariableLayout) -> np.ndarray:
    for pick in layout.picks:
        values = np.take(values, pick.indices, axis=pick.axis)
    return values


@settings(max_examples=examples(120))
@given(st.data())
def test_a_row_range_keeps_those_rows_of_the_chunk_at_dest_row(data: st.DataObject) -> None:
    layout = data.draw(layouts(data.draw(st.integers(1, 40)), picks=data.draw(st.booleans())))
    source = np.arange(np.prod(layout.shape), dtype=np.int64).reshape(layout.shape)
    coords = tuple(
        data.draw(st.integers(0, -(-s // c) - 1))
        for s, c in zip(layout.shape, layout.chunks, strict=True)
    )
    selection = layout.chunk_selection(coords)
    valid_rows = selection[0].stop - selection[0].start
    start = data.draw(st.integers(0, valid_rows - 1))
    stop = data.draw(st.integers(start + 1, valid_rows))
    dest_row = data.draw(st.integers(0, 3))
    read = ChunkRead(coords, dest_row, rows=(start, stop))
    buffer = np.full((dest_row + stop - start, *layout.sample_shape), -2, dtype=np.int64)
    target, keep = chunk_regions(layout, read)
    buffer[target] = stored_chunk(source, layout, coords)[keep]
    rows = source[selection[0].start + start : selection[0].start + stop]
    expected = _picked(rows, layout)
    region = tuple(target[1:])
    assert np.array_equal(
        buffer[dest_row:][(slice(None), *region)],
        expected[(slice(None), *_within(layout, selection))],
    )


def _within(layout: VariableLayout, selection: tuple[slice, ...]) -> tuple[slice, ...]:
    """The chunk's inner region among a picked sample's positions (its own otherwise)."""
    region = []
    for axis, part in enumerate(selection[1:], start=1):
        if (pick := layout.pick_on(axis)) is not None:
            kept = np.asarray(pick.indices)
            region.append(slice(int((kept < part.start).sum()), int((kept < part.stop).sum())))
        else:
            region.append(part)
    return tuple(region)


def test_bad_row_ranges_and_picks_are_refused() -> None:
    layout = VariableLayout((10, 7), (4, 3), "int32")
    with pytest.raises(ValueError, match=r"rows \(1, 5\) of chunk \(0, 0\) are not within its 4"):
        chunk_regions(layout, ChunkRead((0, 0), 0, rows=(1, 5)))
    with pytest.raises(ValueError, match=r"rows .* of chunk \(2, 0\) are not within its 2"):
        chunk_regions(layout, ChunkRead((2, 0), 0, rows=(1, 1)))
    with pytest.raises(ValueError, match="must be along an inner axis"):
        VariableLayout((10, 7), (4, 3), "int32", (AxisPick(0, (1,)),))
    for indices in [(), (3, 1), (2, 2), (7,), (-1, 2)]:
        with pytest.raises(ValueError, match=r"strictly increasing, within 0\.\.6"):
            VariableLayout((10, 7), (4, 3), "int32", (AxisPick(1, indices),))


def test_patches_refuse_a_crop_larger_than_the_area_or_a_repeated_grid_position() -> None:
    """Patches crop an area's grid (its picks on the grid axes): a patch larger than that
    grid is refused naming the area, and so is a grid position held twice."""
    layout = VariableLayout((10, 7, 8), (4, 3, 4), "int32", (AxisPick(2, (1, 5)),))
    geometry = SampleGeometry.from_layouts({"a": layout})
    with pytest.raises(ValueError, match=r"larger than the area's grid \(7, 2\)"):
        AnchorSet.for_split(geometry, np.arange(geometry.num_units), None, PatchSpec((2, 3)))
    AnchorSet.for_split(geometry, np.arange(geometry.num_units), None, PatchSpec((2, 2)))
    twice = VariableLayout((10, 7, 8), (4, 3, 4), "int32", (AxisPick(2, (1, 5), order=(0, 1, 0)),))
    geometry = SampleGeometry.from_layouts({"a": twice})
    with pytest.raises(ValueError, match=r"\['a'\] hold a position of one of them twice"):
        AnchorSet.for_split(geometry, np.arange(geometry.num_units), None, PatchSpec((2, 2)))


# A variable shaped like one pressure-level field: 37 levels in chunks of 4, of which a few
# are kept (irregularly spaced within a chunk: kept by an index; evenly: by a slice).
SHAPE, CHUNKS, KEPT = (12, 37, 96, 128), (1, 4, 96, 128), (0, 1, 3, 13, 36)


def _write(path: Path, compressor: Any) -> np.ndarray:
    values = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    array = zarr.open_group(str(path), mode="w").create_array(
        "t", shape=SHAPE, chunks=CHUNKS, dtype="float32", compressors=compressor, fill_value=0
    )
    array[...] = values
    return values


def _block(path: Path, reader: str, **settings: Any) -> tuple[ReadPlan, Any, ReadContext]:
    layout = VariableLayout(SHAPE, CHUNKS, "float32", (AxisPick(1, KEPT),))
    geometry = SampleGeometry.from_layouts({"t": layout})
    units = np.arange(geometry.num_units)
    assignment = assign_epoch(geometry, units, seed=0, epoch=0, rank=0, world_size=1)
    plan = plan_block(geometry, assignment.units, assignment=assignment, block_index=0)
    store = zarr.storage.LocalStore(str(path), read_only=True)
    context = ReadContext.create(store, {"t": layout}, **settings)
    if reader == "cpu":
        chosen: Any = ChunkReader(context)
    else:  # "device" is the device reader on the CPU
        chosen = DeviceBlockReader(context, torch.device("cuda" if reader == "cuda" else "cpu"))
    return plan, asyncio.run(chosen.read_block(plan, None)), context


@pytest.mark.parametrize(
    "reader",
    [
        "cpu",
        "device",
        pytest.param(
            "cuda",
            marks=pytest.mark.skipif(
                not torch.cuda.is_available() or load_nvcomp() is None,
                reason="needs CUDA and nvCOMP",
            ),
        ),
    ],
)
@pytest.mark.parametrize("codec", ["zstd", "none"])
def test_both_readers_keep_only_the_picked_levels(tmp_path: Path, reader: str, codec: str) -> None:
    """On the CPU device the device reader takes its own path for uncompressed chunks and
    decodes zstd ones on the host; on CUDA nvCOMP decodes both into bounded scratch. All
    keep only the picked levels."""
    values = _write(tmp_path, zarr.codecs.ZstdCodec() if codec == "zstd" else None)
    plan, block, context = _block(tmp_path, reader)
    got = block["t"].cpu().numpy() if isinstance(block["t"], torch.Tensor) else block["t"]
    assert got.shape == (SHAPE[0], len(KEPT), *SHAPE[2:])
    rows = plan.rows["t"][:, 0]
    np.testing.assert_array_equal(got[rows], values[plan.sample_index][:, list(KEPT)])
    # levels 0, 1, 3 are in level chunk 0, 13 in chunk 3, 36 in chunk 9: 3 of 10 are read
    assert context.stats.chunks_read == SHAPE[0] * 3


def test_kept_parts_take_bounded_scratch_not_a_full_size_block(tmp_path: Path) -> None:
    """Decoding every chunk of a block whole but keeping 5 of 37 levels holds the kept
    block plus a few chunks per decode thread (stored bytes, scratch), far below the
    full-size block a decode-then-select would hold."""
    _write(tmp_path, zarr.codecs.ZstdCodec())
    chunk_nbytes = int(np.prod(CHUNKS)) * 4
    kept_nbytes = SHAPE[0] * len(KEPT) * SHAPE[2] * SHAPE[3] * 4
    full_nbytes = int(np.prod(SHAPE)) * 4
    _block(tmp_path, "cpu", decode_threads=2)  # imports and caches, once per process
    tracemalloc.start()
    try:
        _, block, _ = _block(tmp_path, "cpu", decode_threads=2)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert block["t"].nbytes == kept_nbytes
    # measured: about 7 chunks beyond the kept block (2 threads x stored bytes and scratch)
    assert peak < kept_nbytes + 12 * chunk_nbytes < full_nbytes / 3


def test_the_device_scratch_arena_is_reused_round_by_round(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With room for one chunk per round, every partly kept chunk decodes in its own round
    through the same arena, and the block is still exactly the picked levels."""
    values = _write(tmp_path, None)
    chunk_nbytes = int(np.prod(CHUNKS)) * 4
    monkeypatch.setattr(device_decoder, "DEVICE_SCRATCH_BYTES", chunk_nbytes)
    plan, block, _ = _block(tmp_path, "device")
    rows = plan.rows["t"][:, 0]
    got = block["t"].numpy()
    np.testing.assert_array_equal(got[rows], values[plan.sample_index][:, list(KEPT)])
