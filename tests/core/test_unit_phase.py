"""The unit grid's phase on a join (`core.unit_phase`): units start where the costliest
store's chunks start, so each of its chunks is read once an epoch; the units still cover
the axis once, in order; manifests and fingerprints carry a phase that is not 0, and
single stores keep phase 0."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.date_manifest import make_date_manifest
from insitubatch_nodes.core.date_ranges import TimeAxis
from insitubatch_nodes.core.fingerprint import fingerprint_differences, source_fingerprint
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import SplitManifest, make_manifest
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.read_plan import plan_block
from insitubatch_nodes.core.unit_grid import is_aligned
from insitubatch_nodes.core.unit_phase import unit_bounds, unit_count, unit_phase, units_of
from tests.helpers.profiles import examples


def _brute_phase(chunkings: list[tuple[int, int, int]], unit_length: int) -> int:
    """THE RULE by brute force over every step of a unit: the conditions, the costliest
    first, each kept when some phase meets it and the ones kept before."""
    costs: Counter[tuple[int, int]] = Counter()
    for chunk, origin, nbytes in chunkings:
        shared = int(np.gcd(chunk, unit_length))
        if shared > 1:
            costs[(shared, -origin % shared)] += nbytes
    kept: list[tuple[int, int]] = []
    for condition, _ in sorted(costs.items(), key=lambda item: (-item[1], item[0])):
        trial = [*kept, condition]
        if any(all(p % g == r for g, r in trial) for p in range(unit_length)):
            kept = trial
    return next(p for p in range(unit_length) if all(p % g == r for g, r in kept))


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 30), st.integers(0, 60), st.integers(1, 5)),
        min_size=1,
        max_size=4,
    ),
    st.integers(1, 120),
)
def test_the_phase_is_the_rule_by_brute_force(
    chunkings: list[tuple[int, int, int]], unit_length: int
) -> None:
    assert unit_phase(chunkings, unit_length) == _brute_phase(chunkings, unit_length)


@st.composite
def joins(draw: st.DrawFn) -> SampleGeometry:
    """One to three stores (a variable each) on a joined axis of n steps, each starting
    at its own origin inside its stored steps, chunked anyhow, of any inner size; on the
    least common multiple grid, as a join's manifest cuts it."""
    n = draw(st.integers(1, 120))
    variables = {}
    for i in range(draw(st.integers(1, 3))):
        origin = draw(st.integers(0, 40))
        tail = draw(st.integers(0, 10))
        inner = draw(st.integers(1, 6))
        variables[f"v{i}"] = VariableLayout(
            (origin + n + tail, inner),
            (draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 24])), inner),
            "float32",
            origin=origin,
            length=n,
        )
    return SampleGeometry.from_layouts(variables)


def _costliest(geometry: SampleGeometry) -> list[tuple[int, int]]:
    """The conditions `(g, r)` (phase = r mod g) whose variables' chunks decode the most
    bytes together: THE RULE meets one of them."""
    cost: Counter[tuple[int, int]] = Counter()
    for layout in geometry.variables.values():
        shared = int(np.gcd(layout.sample_chunk, geometry.unit_length))
        cost[(shared, -layout.origin % shared)] += layout.sample_chunk * layout.shape[1]
    return [condition for condition, c in cost.items() if c == max(cost.values())]


@settings(max_examples=examples(200), deadline=None)
@given(joins(), st.integers(1, 4), st.integers(0, 3))
def test_each_chunk_of_the_costliest_store_is_read_once_an_epoch(
    geometry: SampleGeometry, block_chunks: int, seed: int
) -> None:
    """Over an epoch's blocks (any block size, any permutation), every chunk of the store
    whose chunks cost the most, and of every store whose chunks the phase also fits, is
    read once, whole; when every store fits, the grid is aligned."""
    anchors = AnchorSet.everything(geometry)
    assignment = assign_epoch(anchors, anchors.units, seed=seed, epoch=0, rank=0, world_size=1)
    reads: dict[str, Counter[tuple[int, ...]]] = {name: Counter() for name in geometry.variables}
    whole: dict[str, bool] = dict.fromkeys(geometry.variables, True)
    for j, start in enumerate(range(0, assignment.units.size, block_chunks)):
        units = assignment.units[start : start + block_chunks]
        plan = plan_block(anchors, units, assignment=assignment, block_index=j)
        for name, found in plan.reads.items():
            reads[name].update(read.coords for read in found)
            whole[name] &= all(read.rows is None for read in found)
    fits = {
        name: (layout.origin + geometry.phase) % layout.sample_chunk == 0
        for name, layout in geometry.variables.items()
    }
    assert any(geometry.phase % g == r for g, r in _costliest(geometry))
    for name, layout in geometry.variables.items():
        first = layout.origin // layout.sample_chunk
        last = (layout.origin + geometry.num_samples - 1) // layout.sample_chunk
        assert sorted(c[0] for c in reads[name]) == list(range(first, last + 1))
        if fits[name]:
            assert set(reads[name].values()) == {1}, name
    if all(fits.values()):
        assert is_aligned(geometry.variables.values(), geometry.unit_length, geometry.phase)
        assert all(whole.values())


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 200), st.integers(1, 30), st.data())
def test_phased_units_cover_the_axis_once_in_order(
    num_samples: int, unit_length: int, data: st.DataObject
) -> None:
    """Unit 0 is the steps before the phase, every other unit but the last is full, and
    `units_of` is the inverse of `unit_bounds`."""
    phase = data.draw(st.integers(0, unit_length - 1))
    count = unit_count(num_samples, unit_length, phase)
    starts, stops = unit_bounds(np.arange(count), unit_length, phase, num_samples)
    assert starts[0] == 0 and stops[-1] == num_samples
    assert np.array_equal(starts[1:], stops[:-1]) and (stops > starts).all()
    sizes = stops - starts
    assert (sizes[1:-1] == unit_length).all()
    if phase and num_samples > phase:
        assert sizes[0] == phase and starts[1] == phase
    steps = np.arange(num_samples)
    owner = units_of(steps, unit_length, phase)
    assert np.array_equal(owner, np.repeat(np.arange(count), sizes))


def _pressure_and_surface(origin: int = 8, steps: int = 200) -> dict[str, VariableLayout]:
    """A 24-step-chunked pressure store starting `origin` steps before a surface store
    chunked 1 step: the benchmark's misaligned inner join."""
    return {
        "t": VariableLayout(
            (origin + steps, 3, 4), (24, 3, 4), "float32", origin=origin, length=steps
        ),
        "t2m": VariableLayout((steps, 4), (1, 4), "float32"),
    }


def test_a_single_store_and_an_aligned_join_keep_phase_zero() -> None:
    one = {"t": VariableLayout((100, 3), (24, 3), "float32")}
    assert SampleGeometry.from_layouts(one).phase == 0
    assert SampleGeometry.from_layouts(_pressure_and_surface(origin=48)).phase == 0
    phased = SampleGeometry.from_layouts(_pressure_and_surface(origin=8))
    assert phased.phase == 16 and phased.num_units == 9
    assert phased.visits(2).phase == 4 and phased.with_unit_length(72).phase == 16


def test_the_costliest_of_two_stores_that_cannot_both_align_is_aligned() -> None:
    """Two 24-step-chunked stores 8 steps apart: only one can start its chunks on unit
    boundaries, and it is the one whose chunks hold more bytes."""

    def join(big_origin: int, small_origin: int) -> SampleGeometry:
        return SampleGeometry.from_layouts(
            {
                "big": VariableLayout(
                    (big_origin + 96, 8), (24, 8), "float32", origin=big_origin, length=96
                ),
                "small": VariableLayout(
                    (small_origin + 96, 2), (24, 2), "float32", origin=small_origin, length=96
                ),
            }
        )

    assert join(8, 0).phase == 16
    assert join(0, 8).phase == 0


def test_a_manifest_records_a_phase_that_is_not_zero() -> None:
    """`phase` is written only when not 0, read back, and a subset of the variables (a
    surface store alone would pick phase 0) keeps the manifest's; a bad one is refused."""
    layouts = _pressure_and_surface()
    manifest = make_manifest(SampleGeometry.from_layouts(layouts))
    data = manifest.to_json()
    assert data["phase"] == 16
    again = SplitManifest.from_json(data)
    assert again.phase == 16 and again.num_units == 9
    assert again.geometry_for({"t2m": layouts["t2m"]}).phase == 16
    assert np.array_equal(again.step_ranges("train")[0], [0, 160])  # units 0..6 of 9
    plain = make_manifest(SampleGeometry.from_layouts({"t2m": layouts["t2m"]}))
    assert "phase" not in plain.to_json()
    for bad in (24, -1, "16", 1.0):
        with pytest.raises(ValueError, match=r"manifest field 'phase' must be an int in 0\.\.23"):
            SplitManifest.from_json({**data, "phase": bad})


def test_a_date_manifest_on_a_phased_grid_lists_the_units_its_steps_touch() -> None:
    geometry = SampleGeometry.from_layouts(_pressure_and_surface())
    dates = np.arange(200, dtype="int64") * 6 * 3600 + 1_577_836_800  # 6-hourly from 2020
    axis = TimeAxis("time", dates.astype("datetime64[s]"))
    manifest = make_date_manifest(
        geometry, axis, {"train": ("2020-01-01", "2020-01-10T18"), "val": "2020-01-11"}
    )
    assert manifest.phase == 16
    assert manifest.steps == {"train": [[0, 40]], "val": [[40, 44]]}
    assert manifest.splits == {"train": [[0, 2]], "val": [[2, 3]]}


def test_a_fingerprint_names_another_phase() -> None:
    layouts = _pressure_and_surface()
    units = np.arange(9)

    def made(phase: int) -> dict[str, object]:
        return source_fingerprint(layouts, {}, {}, "all", units, None, phase=phase)

    assert "phase" not in made(0)["split"]  # type: ignore[operator]
    assert made(16)["split"]["phase"] == 16  # type: ignore[index]
    (difference,) = fingerprint_differences(made(0), made(16))
    assert "cut into units from step 0 of the joined axis when the state was saved" in difference
    assert "now from step 16" in difference


@settings(max_examples=examples(100), deadline=None)
@given(joins(), st.integers(1, 4), st.integers(0, 3))
def test_the_short_first_unit_is_dealt_like_any_short_unit(
    geometry: SampleGeometry, world_size: int, epoch: int
) -> None:
    """The ranks' shares of an epoch hold every step once, and differ by at most a full
    unit's samples (deal version 2 gives the short units to the smallest shares)."""
    anchors = AnchorSet.everything(geometry)
    units = anchors.units
    if units.size < world_size:
        return
    shares = [
        assign_epoch(anchors, units, seed=1, epoch=epoch, rank=r, world_size=world_size)
        for r in range(world_size)
    ]
    steps = np.concatenate([anchors.unit_samples(share.units) for share in shares])
    assert sorted(steps.tolist()) == list(range(geometry.num_samples))
    counts = [int(anchors.unit_sizes(share.units).sum()) for share in shares]
    assert max(counts) - min(counts) <= geometry.unit_length


def test_past_a_jump_the_longest_run_of_the_costliest_store_is_aligned() -> None:
    """The pressure store (24 steps a chunk, 8 steps early) jumps over 4 steps at joined
    step 10 (the surface store's missing day): the phase fits its run of 190 steps, not
    its first 10, and each chunk wholly inside that run is read once an epoch."""
    pressure = VariableLayout(
        (8 + 200 + 4, 3), (24, 3), "float32", origin=8, length=200, runs=((10, 22),)
    )
    geometry = SampleGeometry.from_layouts(
        {"t": pressure, "t2m": VariableLayout((200, 2), (1, 2), "float32")}
    )
    assert geometry.phase == 12  # joined step 12 is stored step 24
    anchors = AnchorSet.everything(geometry)
    assignment = assign_epoch(anchors, anchors.units, seed=0, epoch=0, rank=0, world_size=1)
    reads: Counter[int] = Counter()
    for j, start in enumerate(range(0, assignment.units.size, 2)):
        units = assignment.units[start : start + 2]
        plan = plan_block(anchors, units, assignment=assignment, block_index=j)
        reads.update(read.coords[0] for read in plan.reads["t"])
    assert all(reads[chunk] == 1 for chunk in range(1, 212 // 24))
