"""Joined stores in the core: variables whose sample axis starts at an origin inside their
own stored steps (`VariableLayout.origin`). Read plans still give every (anchor, offset)
its stored row, within the memory bound, on every grid, and a manifest keeps the origin."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import SplitManifest, make_manifest
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.read_plan import chunk_regions, plan_block
from insitubatch_nodes.core.unit_grid import finest_chunk, is_aligned, slot_rows, unit_rows_bound
from tests.helpers.profiles import examples
from tests.helpers.strategies import counting_arrays, stored_chunk, window_and_lead_specs


@st.composite
def joined_geometries(draw: st.DrawFn) -> SampleGeometry:
    """Up to three variables (stores) on one joined axis of n steps, each with its own
    sample-axis chunking, origin, steps after the joined ones and, sometimes, steps the
    join left out inside its run (a hole in another store: its map jumps over them); on
    the least common multiple grid, the fine grid, or revisits of either."""
    n = draw(st.integers(1, 90))
    variables = {}
    for i in range(draw(st.integers(1, 3))):
        origin = draw(st.integers(0, 30))
        tail = draw(st.integers(0, 10))
        inner = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
        jumps = sorted(draw(st.sets(st.integers(1, max(1, n - 1)), max_size=3))) if n > 1 else []
        runs, skipped = [], 0
        for j in jumps:
            skipped += draw(st.integers(1, 5))
            runs.append((j, origin + j + skipped))
        variables[f"v{i}"] = VariableLayout(
            (origin + n + skipped + tail, *inner),
            (draw(st.integers(1, 9)), *(1 for _ in inner)),
            "float32",
            origin=origin,
            length=n,
            runs=tuple(runs),
        )
    geometry = SampleGeometry.from_layouts(variables)
    if draw(st.booleans()):
        fine = finest_chunk(variables.values())
        geometry = SampleGeometry.from_layouts(variables, unit_length=fine)
    divisors = [k for k in range(1, geometry.unit_length + 1) if geometry.unit_length % k == 0]
    return geometry.visits(draw(st.sampled_from(divisors)))


@settings(max_examples=examples(200), deadline=None)
@given(joined_geometries(), st.integers(1, 4), st.data())
def test_plans_read_each_variable_at_its_own_stored_steps(
    geometry: SampleGeometry, block_chunks: int, data: st.DataObject
) -> None:
    """Each block's reads, placed from each variable's padded stored chunks, give every
    (anchor, offset) its stored row (`origin + step`, past a jump its run's); every
    buffer row is written once; no segment is longer than a slot; the slots stay within
    `block_rows_bound`."""
    spec = data.draw(window_and_lead_specs(sorted(geometry.variables)))
    anchors = AnchorSet.for_steps(geometry, np.array([[0, geometry.num_samples]]), spec)
    if anchors.units.size == 0:
        return
    assignment = assign_epoch(anchors, anchors.units, seed=3, epoch=1, rank=0, world_size=1)
    sources = counting_arrays(geometry)
    aligned = is_aligned(geometry.variables.values(), geometry.unit_length, geometry.phase)
    for j, start in enumerate(range(0, assignment.units.size, block_chunks)):
        units = assignment.units[start : start + block_chunks]
        plan = plan_block(anchors, units, assignment=assignment, block_index=j)
        bound = anchors.block_rows_bound(units.size)
        for name, reads in plan.reads.items():
            layout = geometry.variables[name]
            shape = (plan.buffer_rows[name], *layout.sample_shape)
            buffer = np.full(shape, -2, dtype=np.int64)
            writes = np.zeros(shape, dtype=np.int64)
            for read in reads:
                target, keep = chunk_regions(layout, read)
                buffer[target] = stored_chunk(sources[name], layout, read.coords)[keep]
                writes[target] += 1
            assert (writes == 1).all()
            steps = plan.sample_index[:, None] + np.asarray(plan.offsets[name])[None, :]
            stored = layout.stored_steps(steps)
            assert np.array_equal(buffer[plan.rows[name]], sources[name][stored])
            segments = np.diff(plan.segment_starts[name], append=plan.buffer_rows[name])
            if aligned:
                assert segments.max() <= layout.sample_chunk
            else:
                rows = slot_rows(layout.sample_chunk, geometry.unit_length)
                assert segments.max() <= rows
                assert segments.size * rows <= bound


def test_unit_rows_bound_holds_every_origin_by_brute_force() -> None:
    """The bound of one unit's slot rows holds for every cell and every origin."""
    for chunk in range(1, 10):
        for unit in range(1, 13):
            for origin in range(0, 2 * chunk):
                bound = unit_rows_bound(chunk, unit, 0, 0, origin)
                for cell in range(chunk * unit):
                    first = cell * unit + origin
                    pieces = (first + unit - 1) // chunk - first // chunk + 1
                    assert pieces * slot_rows(chunk, unit) <= bound


def test_an_origin_off_the_chunks_is_not_aligned() -> None:
    """A joined store whose origin is not on a chunk boundary moves its chunk boundaries
    off the units: plans then read pieces (a chunk may serve two units)."""
    on = VariableLayout((48, 2), (24, 2), "float32", origin=24, length=24)
    off = VariableLayout((48, 2), (24, 2), "float32", origin=8, length=24)
    assert is_aligned([on], 24)
    assert not is_aligned([off], 24)


def test_a_manifest_keeps_each_store_origin() -> None:
    """A manifest records where the joined axis lies in each array, and refuses layouts
    whose origin moved (another join of the stores)."""
    layouts = {
        "t": VariableLayout((60, 3), (24, 3), "float32", origin=10, length=50),
        "t2m": VariableLayout((50, 3), (1, 3), "float32"),
    }
    manifest = make_manifest(SampleGeometry.from_layouts(layouts), allow_empty=True)
    again = SplitManifest.loads(manifest.dumps())
    assert again.layouts["t"].origin == 10 and again.layouts["t"].sample_length == 50
    assert again.geometry_for(layouts).num_samples == 50
    moved = dict(layouts, t=VariableLayout((60, 3), (24, 3), "float32", origin=0, length=50))
    with pytest.raises(ValueError, match="'t' is now"):
        again.geometry_for(moved)


def test_a_sample_axis_outside_the_array_is_refused() -> None:
    with pytest.raises(ValueError, match="does not lie within the array's 10 steps"):
        VariableLayout((10,), (2,), "float32", origin=4, length=7)
