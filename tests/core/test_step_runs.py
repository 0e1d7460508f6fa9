"""A joined store's map in runs (`core.step_runs`): any increasing choice of stored steps
is its runs, found step by step; the jumps a window holds are counted by brute force;
layouts and manifests keep the runs, and maps that cannot be are refused."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import SplitManifest, make_manifest
from insitubatch_nodes.core.step_runs import (
    check_runs,
    most_run_starts,
    run_index,
    stored_end,
    stored_steps,
)


def runs_of(kept: np.ndarray) -> tuple[tuple[int, int], ...]:
    """The runs of kept stored steps, as `core.time_join` makes them."""
    jumps = np.flatnonzero(np.diff(kept) != 1) + 1
    return tuple((int(j), int(kept[j])) for j in jumps)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 200), min_size=1, max_size=60, unique=True), st.integers(0, 5))
def test_the_runs_map_every_joined_step_to_its_stored_step(kept: list[int], tail: int) -> None:
    steps = np.array(sorted(kept), dtype=np.int64)
    runs = check_runs(runs_of(steps), int(steps[0]), steps.size, int(steps[-1]) + 1 + tail)
    joined = np.arange(steps.size)
    assert np.array_equal(stored_steps(joined, int(steps[0]), runs), steps)
    assert stored_end(int(steps[0]), steps.size, runs) == steps[-1] + 1
    assert np.array_equal(run_index(joined, runs), np.cumsum(np.r_[0, np.diff(steps) != 1]))


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(1, 80), max_size=8), st.integers(1, 30))
def test_most_run_starts_is_the_most_jumps_inside_any_window(starts: set[int], window: int) -> None:
    """A jump at joined step j lies inside a window [x, x + window) when x < j < x +
    window: it cuts that window's steps in two."""
    runs = tuple((j, 2 * j) for j in sorted(starts))
    brute = max((sum(x < j < x + window for j in starts) for x in range(-window, 90)), default=0)
    assert most_run_starts(runs, window) == brute


def _holed() -> VariableLayout:
    """A pressure store's map: 40 joined steps from its step 8, jumping over its steps 20
    and 31 .. 32."""
    return VariableLayout(
        (60, 3), (24, 3), "float32", origin=8, length=40, runs=((12, 21), (22, 33))
    )


def test_a_layout_and_a_manifest_keep_the_runs() -> None:
    layout = _holed()
    assert layout.to_json()["runs"] == [[12, 21], [22, 33]]
    assert VariableLayout.from_json(layout.to_json()) == layout
    assert layout.stored_steps(np.array([0, 11, 12, 21, 22, 39])).tolist() == [
        8,
        19,
        21,
        30,
        33,
        50,
    ]
    layouts = {"t": layout, "t2m": VariableLayout((40, 3), (1, 3), "float32")}
    manifest = make_manifest(SampleGeometry.from_layouts(layouts), allow_empty=True)
    again = SplitManifest.loads(manifest.dumps())
    assert again.layouts["t"].runs == ((12, 21), (22, 33))
    assert again.geometry_for(layouts).num_samples == 40
    other = dict(layouts, t=VariableLayout((60, 3), (24, 3), "float32", origin=8, length=40))
    with pytest.raises(ValueError, match="'t' is now"):
        again.geometry_for(other)


@pytest.mark.parametrize(
    ("runs", "length", "message"),
    [
        (((12, 20),), 40, "leave out at least one stored step"),
        (((12, 21), (12, 30)), 40, "start later on both axes"),
        (((40, 60),), 40, "start later on both axes"),
        (((30, 52),), 40, "ends past the array's 60 steps"),
        (((12, 21),), None, "needs the sample axis' length"),
    ],
)
def test_maps_that_cannot_be_are_refused(
    runs: tuple[tuple[int, int], ...], length: int | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        VariableLayout((60, 3), (24, 3), "float32", origin=8, length=length, runs=runs)
