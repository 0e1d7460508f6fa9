"""Windows and leads in the pure core: no window or target crosses a split boundary, every
valid anchor is used exactly once per epoch, and a block reads each chunk it needs once."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.draw_order import rank_epoch_order
from insitubatch_nodes.core.geometry import SampleGeometry
from insitubatch_nodes.core.manifest import make_manifest
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.read_plan import plan_block
from insitubatch_nodes.core.sample_spec import SampleSpec, leads, window
from insitubatch_nodes.core.short_unit_deal import rank_sample_counts
from tests.helpers.strategies import geometries


@st.composite
def specs(draw: st.DrawFn, variables: list[str]) -> SampleSpec:
    inputs = window(
        draw(st.lists(st.sampled_from(variables), min_size=1, unique=True)),
        steps=draw(st.integers(1, 4)),
        stride=draw(st.integers(1, 3)),
    )
    groups = {"inputs": inputs}
    if draw(st.booleans()):
        groups["targets"] = leads(
            draw(st.lists(st.sampled_from(variables), min_size=1, unique=True)),
            draw(st.lists(st.integers(1, 7), min_size=1, max_size=3, unique=True)),
        )
    return SampleSpec(groups)


@st.composite
def split_setups(draw: st.DrawFn) -> tuple[SampleGeometry, np.ndarray, SampleSpec]:
    geometry = draw(geometries(max_samples=120))
    fractions = draw(
        st.sampled_from(
            [{"train": 1.0}, {"train": 0.5, "val": 0.5}, {"a": 0.3, "b": 0.4, "c": 0.3}]
        )
    )
    manifest = make_manifest(
        geometry,
        fractions,
        shuffle=draw(st.booleans()),
        seed=draw(st.integers(0, 9)),
        allow_empty=True,
    )
    split = draw(st.sampled_from(sorted(fractions)))
    units = np.zeros(0, dtype=np.int64)
    if manifest.splits[split]:
        units = manifest.units(split)
    return geometry, units, draw(specs(sorted(geometry.variables)))


def _in_split_mask(geometry: SampleGeometry, split_units: np.ndarray) -> np.ndarray:
    mask = np.zeros(geometry.num_samples, dtype=bool)
    mask[geometry.unit_samples(split_units)] = True
    return mask


@settings(max_examples=200)
@given(split_setups())
def test_anchors_are_exactly_those_whose_whole_span_stays_in_the_split(
    setup: tuple[SampleGeometry, np.ndarray, SampleSpec],
) -> None:
    geometry, split_units, spec = setup
    anchors = AnchorSet.for_split(geometry, split_units, spec)
    mask = _in_split_mask(geometry, split_units)
    lo, hi = spec.span
    # brute force: t is usable iff every step t+lo .. t+hi exists and is in the split
    expected = [
        t
        for t in range(geometry.num_samples)
        if t + lo >= 0 and t + hi < geometry.num_samples and mask[t + lo : t + hi + 1].all()
    ]
    got = anchors.unit_samples(anchors.units)
    assert sorted(got.tolist()) == expected
    assert got.size == anchors.num_anchors
    assert np.all(anchors.unit_sizes(anchors.units) >= 1)
    # every step any group reads lies in the split, so no window or target crosses it
    for group in spec.groups.values():
        steps = got[:, None] + np.array(group.offsets)[None, :]
        assert mask[steps].all()


@settings(max_examples=120)
@given(split_setups(), st.integers(1, 4), st.integers(1, 9), st.integers(1, 3), st.data())
def test_every_valid_anchor_is_used_exactly_once_per_epoch(
    setup: tuple[SampleGeometry, np.ndarray, SampleSpec],
    block_chunks: int,
    batch_size: int,
    world_size: int,
    data: st.DataObject,
) -> None:
    geometry, split_units, spec = setup
    anchors = AnchorSet.for_split(geometry, split_units, spec)
    units = anchors.units
    if units.size < world_size:
        with pytest.raises(ValueError, match="fewer than world_size"):
            rank_sample_counts(anchors, units, world_size)
        return
    epoch = data.draw(st.integers(0, 5))
    counts = rank_sample_counts(anchors, units, world_size)
    assert counts.sum() == anchors.num_anchors
    seen: Counter[int] = Counter()
    for rank in range(world_size):
        assignment = assign_epoch(
            anchors, units, seed=3, epoch=epoch, rank=rank, world_size=world_size
        )
        assert anchors.unit_sizes(assignment.units).sum() == counts[rank]  # epoch-independent
        order = rank_epoch_order(
            anchors,
            assignment,
            block_chunks=block_chunks,
            batch_size=batch_size,
            drop_last=False,
        )
        assert order.size == counts.max()
        seen.update(order[: counts[rank]].tolist())  # beyond its own count a rank pads
    assert sorted(seen) == sorted(anchors.unit_samples(units).tolist())
    assert set(seen.values()) == {1}


@settings(max_examples=120)
@given(split_setups(), st.integers(1, 4))
def test_a_block_reads_each_needed_chunk_once_and_rows_point_at_the_right_steps(
    setup: tuple[SampleGeometry, np.ndarray, SampleSpec], block_chunks: int
) -> None:
    geometry, split_units, spec = setup
    anchors = AnchorSet.for_split(geometry, split_units, spec)
    if anchors.units.size == 0:
        return
    assignment = assign_epoch(anchors, anchors.units, seed=0, epoch=0, rank=0, world_size=1)
    offsets = spec.variable_offsets()
    for j, start in enumerate(range(0, assignment.units.size, block_chunks)):
        units = assignment.units[start : start + block_chunks]
        plan = plan_block(anchors, units, assignment=assignment, block_index=j)
        assert np.array_equal(plan.sample_index, anchors.unit_samples(units))
        assert set(plan.reads) == set(offsets)
        for name, reads in plan.reads.items():
            layout = geometry.variables[name]
            assert len(set(r.coords for r in reads)) == len(reads)  # once per block
            step_of_row = np.full(plan.buffer_rows[name], -1)
            for read in reads:
                selection = layout.chunk_selection(read.coords)[0]
                step_of_row[read.dest_row : read.dest_row + selection.stop - selection.start] = (
                    np.arange(selection.start, selection.stop)
                )
            wanted = plan.sample_index[:, None] + np.array(offsets[name])[None, :]
            assert np.array_equal(step_of_row[plan.rows[name]], wanted)
            # nothing read that no anchor needs
            needed = set((wanted // layout.sample_chunk).reshape(-1).tolist())
            assert {r.coords[0] for r in reads} == needed


def test_two_step_window_halo_costs_one_extra_chunk_per_run_of_units() -> None:
    from insitubatch_nodes.core.geometry import VariableLayout

    geometry = SampleGeometry.from_layouts({"t": VariableLayout((64, 3), (4, 3), "float32")})
    spec = SampleSpec({"x": window(["t"], steps=2), "y": leads(["t"], [1])})
    anchors = AnchorSet.for_split(geometry, np.arange(16), spec)
    assert anchors.num_anchors == 62  # t=0 has no previous step, t=63 no next one
    assignment = assign_epoch(anchors, anchors.units, seed=0, epoch=0, rank=0, world_size=1)
    plan = plan_block(anchors, np.array([4, 5, 9]), assignment=assignment, block_index=0)
    # units 4-5 are adjacent: chunks 3..6; unit 9: chunks 8..10
    assert sorted(r.coords[0] for r in plan.reads["t"]) == [3, 4, 5, 6, 8, 9, 10]
