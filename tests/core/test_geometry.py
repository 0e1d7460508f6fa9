"""Units and read plans: chunk-aligned, exhaustive, read-once (pure core, no IO)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.read_plan import ChunkRead, chunk_regions, plan_block
from tests.helpers.strategies import counting_arrays, geometries, stored_chunk


@given(geometries())
def test_units_tile_the_sample_axis_on_every_chunk_boundary(geometry: SampleGeometry) -> None:
    units = np.arange(geometry.num_units)
    samples = geometry.unit_samples(units)
    assert np.array_equal(samples, np.arange(geometry.num_samples))
    for layout in geometry.variables.values():
        assert geometry.unit_length % layout.sample_chunk == 0
    sizes = geometry.unit_sizes(units)
    assert (sizes[:-1] == geometry.unit_length).all()
    assert 1 <= sizes[-1] <= geometry.unit_length


@settings(max_examples=60)
@given(geometries(), st.integers(1, 4))
def test_read_plan_reads_each_chunk_once_and_covers_each_row_once(
    geometry: SampleGeometry, block_chunks: int
) -> None:
    assignment = assign_epoch(
        geometry, np.arange(geometry.num_units), seed=0, epoch=0, rank=0, world_size=1
    )
    read_in_epoch: dict[str, list[tuple[int, ...]]] = {n: [] for n in geometry.variables}
    for j, start in enumerate(range(0, assignment.units.size, block_chunks)):
        units = assignment.units[start : start + block_chunks]
        plan = plan_block(geometry, units, assignment=assignment, block_index=j)
        assert np.array_equal(plan.sample_index, geometry.unit_samples(units))
        for name, layout in geometry.variables.items():
            covered = np.zeros((plan.num_samples, *layout.sample_shape), dtype=np.int64)
            for read in plan.reads[name]:
                selection = layout.chunk_selection(read.coords)
                rows = selection[0].stop - selection[0].start
                # the chunk's rows hold exactly the samples the plan says they hold
                assert np.array_equal(
                    plan.sample_index[read.dest_row : read.dest_row + rows],
                    np.arange(selection[0].start, selection[0].stop),
                )
                covered[(slice(read.dest_row, read.dest_row + rows), *selection[1:])] += 1
                read_in_epoch[name].append(read.coords)
            assert (covered == 1).all()
    for name, layout in geometry.variables.items():
        every_chunk = {
            (i, *rest)
            for i in range(-(-geometry.num_samples // layout.sample_chunk))
            for rest in layout.inner_chunk_grid()
        }
        assert sorted(read_in_epoch[name]) == sorted(every_chunk)  # once each, all of them


def test_chunk_regions_place_an_edge_chunk_by_hand() -> None:
    layout = VariableLayout((10, 7), (4, 3), "int32")
    target, valid = chunk_regions(layout, ChunkRead((2, 2), dest_row=5))
    assert target == (slice(5, 7), slice(6, 7))  # rows 8, 9 land at 5, 6; column 6 only
    assert valid == (slice(0, 2), slice(0, 1))  # the rest of the stored chunk is padding
    target, valid = chunk_regions(layout, ChunkRead((0, 1), dest_row=0))
    assert target == (slice(0, 4), slice(3, 6))
    assert valid == (slice(0, 4), slice(0, 3))


@settings(max_examples=100)
@given(st.booleans().flatmap(lambda picks: geometries(picks=picks)), st.integers(1, 4))
def test_chunk_regions_assemble_each_block_from_stored_chunks(
    geometry: SampleGeometry, block_chunks: int
) -> None:
    """Every plan's chunks, placed by `chunk_regions` from their padded stored form, give a
    block whose row of each (anchor, offset) is the source's own slice at that step (at
    the picked positions only, for a layout that picks some along an inner axis), and
    every buffer element is written by exactly one chunk: chunks holding no picked
    position are not read."""
    assignment = assign_epoch(
        geometry, np.arange(geometry.num_units), seed=0, epoch=0, rank=0, world_size=1
    )
    sources = counting_arrays(geometry)
    for j, start in enumerate(range(0, assignment.units.size, block_chunks)):
        units = assignment.units[start : start + block_chunks]
        plan = plan_block(geometry, units, assignment=assignment, block_index=j)
        for name, layout in geometry.variables.items():
            shape = (plan.buffer_rows[name], *layout.sample_shape)
            buffer = np.full(shape, -2, dtype=np.int64)
            writes = np.zeros(shape, dtype=np.int64)
            for read in plan.reads[name]:
                target, keep = chunk_regions(layout, read)
                assert buffer[target].size > 0  # no read keeps nothing
                buffer[target] = stored_chunk(sources[name], layout, read.coords)[keep]
                writes[target] += 1
            assert (writes == 1).all()
            steps = plan.sample_index[:, None] + np.asarray(plan.offsets[name])[None, :]
            expected = sources[name][steps]
            for pick in layout.picks:  # the sample's axis `pick.axis` is axis + 1 here
                expected = np.take(expected, pick.indices, axis=pick.axis + 1)
            assert np.array_equal(buffer[plan.rows[name]], expected)


def test_unit_is_least_common_multiple_of_sample_chunks() -> None:
    geometry = SampleGeometry.from_layouts(
        {
            "a": VariableLayout((30, 2), (4, 2), "float32"),
            "b": VariableLayout((30,), (6,), "int16"),
        }
    )
    assert geometry.unit_length == 12
    assert geometry.num_units == 3
    assert geometry.unit_range(2) == (24, 30)


def test_variables_with_different_sample_axes_are_refused() -> None:
    with pytest.raises(ValueError, match=r"same length along the sample axis.*a=30, b=31"):
        SampleGeometry.from_layouts(
            {
                "a": VariableLayout((30, 2), (4, 2), "float32"),
                "b": VariableLayout((31,), (6,), "int16"),
            }
        )


def test_zero_dimensional_arrays_are_refused() -> None:
    with pytest.raises(ValueError, match="0-d array"):
        VariableLayout((), (), "float32")
