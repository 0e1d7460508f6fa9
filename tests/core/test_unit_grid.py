"""Units finer than chunks (a fine grid for misaligned chunkings, revisits): read plans
keep only each unit's rows and still give every sample's values, block memory stays within
its bound, and every sample is in exactly one split and one rank's epoch once."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.draw_order import rank_epoch_order
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import make_manifest
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.pool_order import pool_epoch_order
from insitubatch_nodes.core.read_plan import chunk_regions, plan_block
from insitubatch_nodes.core.unit_grid import (
    finest_chunk,
    needs_fine_grid,
    own_units,
    slot_rows,
    unit_rows_bound,
)
from tests.helpers.profiles import examples
from tests.helpers.strategies import (
    counting_arrays,
    geometries,
    stored_chunk,
    window_and_lead_specs,
)


@st.composite
def manifest_grids(draw: st.DrawFn, max_samples: int = 150) -> tuple[SampleGeometry, int]:
    """A geometry on the least-common-multiple grid or the fine grid (what a manifest is
    cut on), and revisits (a divisor of its unit length)."""
    geometry = draw(geometries(max_samples=max_samples))
    if draw(st.booleans()):
        fine = finest_chunk(geometry.variables.values())
        geometry = SampleGeometry.from_layouts(geometry.variables, unit_length=fine)
    divisors = [k for k in range(1, geometry.unit_length + 1) if geometry.unit_length % k == 0]
    return geometry, draw(st.sampled_from(divisors))


def grids(max_samples: int = 150) -> st.SearchStrategy[SampleGeometry]:
    """A loader's grid: a manifest grid cut into its revisits."""
    return manifest_grids(max_samples).map(lambda pair: pair[0].visits(pair[1]))


@settings(max_examples=examples(150), deadline=None)
@given(grids(), st.integers(1, 4), st.data())
def test_pieces_assemble_every_sample_within_the_memory_bound(
    geometry: SampleGeometry, block_chunks: int, data: st.DataObject
) -> None:
    """On any grid, each block's reads placed from the padded stored chunks give every
    (anchor, offset) its source row, every buffer row is written once, no segment is
    longer than a slot, and the slots a block leases stay within `block_rows_bound`."""
    spec = data.draw(window_and_lead_specs(sorted(geometry.variables)))
    anchors = AnchorSet.for_steps(geometry, np.array([[0, geometry.num_samples]]), spec)
    if anchors.units.size == 0:
        return
    assignment = assign_epoch(anchors, anchors.units, seed=1, epoch=0, rank=0, world_size=1)
    sources = counting_arrays(geometry)
    for j, start in enumerate(range(0, assignment.units.size, block_chunks)):
        units = assignment.units[start : start + block_chunks]
        plan = plan_block(anchors, units, assignment=assignment, block_index=j)
        bound = anchors.block_rows_bound(units.size)
        for name in plan.reads:
            layout = geometry.variables[name]
            shape = (plan.buffer_rows[name], *layout.sample_shape)
            buffer = np.full(shape, -2, dtype=np.int64)
            writes = np.zeros(shape, dtype=np.int64)
            for read in plan.reads[name]:
                target, keep = chunk_regions(layout, read)
                buffer[target] = stored_chunk(sources[name], layout, read.coords)[keep]
                writes[target] += 1
            assert (writes == 1).all()
            steps = plan.sample_index[:, None] + np.asarray(plan.offsets[name])[None, :]
            assert np.array_equal(buffer[plan.rows[name]], sources[name][steps])
            segments = np.diff(plan.segment_starts[name], append=plan.buffer_rows[name])
            rows = slot_rows(layout.sample_chunk, geometry.unit_length)
            if geometry.unit_length % layout.sample_chunk:
                assert segments.max() <= rows
                assert segments.size * rows <= bound
            else:
                assert segments.max() <= layout.sample_chunk


@settings(max_examples=150, deadline=None)
@given(
    manifest_grids(max_samples=120),
    st.integers(1, 3),
    st.integers(1, 9),
    st.integers(1, 6),
    st.booleans(),
    st.booleans(),
    st.data(),
)
def test_every_sample_is_in_one_split_and_one_rank_once_per_epoch(
    grid: tuple[SampleGeometry, int],
    world_size: int,
    batch_size: int,
    pool_size: int,
    pool: bool,
    drop_last: bool,
    data: st.DataObject,
) -> None:
    """Splits cut on the manifest's grid, read on its revisits' grid, hold disjoint
    samples; each split's ranks
    yield the same count and, without drop_last, cover it (repeats only as pads), with a
    deterministic order, under both shuffles."""
    base, revisits = grid
    manifest = make_manifest(base, {"train": 0.6, "val": 0.2, "test": 0.2}, allow_empty=True)
    geometry = base.visits(revisits)
    spec = data.draw(window_and_lead_specs(sorted(geometry.variables)))
    seen: list[np.ndarray] = []
    for split in ("train", "val", "test"):
        if not manifest.splits[split]:
            continue
        anchors = AnchorSet.for_steps(geometry, manifest.step_ranges(split), spec)
        if anchors.units.size < world_size:
            continue
        counts = []
        covered = []
        for rank in range(world_size):
            a = assign_epoch(
                anchors, anchors.units, seed=3, epoch=1, rank=rank, world_size=world_size
            )
            if pool:
                order = pool_epoch_order(
                    anchors, a, pool_size=pool_size, batch_size=batch_size, drop_last=drop_last
                )
                again = pool_epoch_order(
                    anchors, a, pool_size=pool_size, batch_size=batch_size, drop_last=drop_last
                )
            else:
                order = rank_epoch_order(
                    anchors, a, block_chunks=2, batch_size=batch_size, drop_last=drop_last
                )
                again = rank_epoch_order(
                    anchors, a, block_chunks=2, batch_size=batch_size, drop_last=drop_last
                )
            assert np.array_equal(order, again)
            counts.append(order.size)
            own = anchors.unit_samples(a.units)
            repeats = Counter(order.tolist())
            assert set(repeats) <= set(own.tolist())
            if drop_last:
                assert max(repeats.values(), default=1) == 1
            else:
                assert set(repeats) == set(own.tolist())
            covered.append(own)
        assert len(set(counts)) == 1
        mine = np.concatenate(covered)
        assert np.array_equal(np.sort(mine), anchors.anchors)  # each anchor in one rank
        seen.append(mine)
    everything = np.concatenate(seen) if seen else np.zeros(0, dtype=np.int64)
    assert np.unique(everything).size == everything.size  # no sample in two splits


def test_unit_rows_bound_holds_every_phase_by_brute_force() -> None:
    """The bound is at least the slots any unit's pieces (own cell and halos) take, for
    every unit of a long axis, by counting the pieces directly."""
    for chunk in range(1, 13):
        for unit in range(1, 13):
            for before, after in ((0, 0), (1, 0), (3, 2), (13, 5)):
                worst = 0
                for u in range(2, 60):
                    steps = np.arange(u * unit - before, (u + 1) * unit + after)
                    pieces = np.unique((steps // chunk) * 1000 + steps // unit).size
                    worst = max(worst, pieces * slot_rows(chunk, unit))
                assert unit_rows_bound(chunk, unit, before, after) >= worst


def test_the_fine_grid_rule_and_revisits_refusal() -> None:
    layouts = {
        "a": VariableLayout((840, 2), (5, 2), "float32"),
        "b": VariableLayout((840,), (7,), "float32"),
        "c": VariableLayout((840,), (12,), "float32"),
    }
    coarse = SampleGeometry.from_layouts(layouts)
    assert coarse.unit_length == 420
    assert needs_fine_grid({"train": 2, "val": 0, "test": 0})
    assert not needs_fine_grid({"train": 3, "val": 1})
    # dates inside units of 420: val and test only share unit 1 with train
    assert own_units(np.array([[0, 600]]), 420, 840) == 1
    assert own_units(np.array([[600, 720]]), 420, 840) == 0
    assert own_units(np.array([[720, 840]]), 420, 840) == 0
    assert own_units(np.array([[0, 5], [835, 840]]), 5, 838) == 2  # the ragged last unit
    fine = SampleGeometry.from_layouts(layouts, unit_length=finest_chunk(layouts.values()))
    assert fine.unit_length == 5 and fine.num_units == 168
    with pytest.raises(ValueError, match="nor the fine grid of the shortest chunk length"):
        SampleGeometry.from_layouts(layouts, unit_length=6)
    assert coarse.visits(4).unit_length == 105
    with pytest.raises(ValueError, match=r"revisits=8 must divide the unit length of 420"):
        coarse.visits(8)
