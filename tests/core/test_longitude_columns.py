"""`core.longitude_columns`: a run found for a western edge holds every column within the
span east of it, on any longitudes (any order, spacing, seam, duplicates), and the
harmonics are each column's (1, cos, sin)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from insitubatch_nodes.core.longitude_columns import longitude_columns

HOUR = 2 * math.pi / 24


def _grids() -> st.SearchStrategy[np.ndarray]:
    """Regular grids of any resolution and origin, in either convention, boxes across the
    seam, and irregular or shuffled longitudes with repeats."""
    regular = st.builds(
        lambda n, origin, start: (origin + np.arange(n) * (360.0 / n) + start) % 360.0 + start,
        st.integers(24, 1440),
        st.floats(0.0, 5.0),
        st.sampled_from([0.0, -180.0]),
    )
    box = st.builds(
        lambda west, width, step: west + np.arange(0.0, width, step),
        st.floats(-180.0, 360.0),
        st.floats(90.0, 300.0),
        st.floats(0.25, 2.0),
    )
    irregular = hnp.arrays(
        np.float64, st.integers(40, 400), elements=st.floats(-180.0, 360.0, width=32)
    )
    return st.one_of(regular, box, irregular)


@settings(max_examples=150, deadline=None)
@given(_grids(), st.lists(st.floats(0.0, 2 * math.pi), min_size=1, max_size=20))
def test_a_run_holds_every_column_within_the_span_east_of_its_edge(
    degrees: np.ndarray, edges: list[float]
) -> None:
    columns = longitude_columns(degrees, HOUR, np.asarray)
    if columns is None:  # refused only where a run would take a third of the columns
        stored = np.remainder(np.deg2rad(degrees), 2 * math.pi)
        reach = HOUR + math.pi / degrees.size + 1e-6  # the span and an arc
        apart = np.remainder(stored[None, :] - stored[:, None], 2 * math.pi)
        assert 3 * (int((apart <= reach).sum(axis=1).max()) + 1) > degrees.size
        return
    western = np.asarray(edges, np.float32)
    found, radians = columns.search(np, western)
    assert found.shape == radians.shape == (columns.window, len(edges))
    stored = np.deg2rad(degrees)
    for edge, run, run_radians in zip(western, found.T, radians.T, strict=True):
        east = np.remainder(stored - edge, 2 * math.pi)
        within = np.flatnonzero(east <= HOUR - 1e-5)
        assert set(within.tolist()) <= set(run.tolist())
        # each run's radians are its columns' longitudes, unwrapped eastward of the edge
        np.testing.assert_allclose(
            np.remainder(run_radians - stored[run] + math.pi, 2 * math.pi) - math.pi,
            0.0,
            atol=1e-5,
        )


def test_the_harmonics_are_each_columns() -> None:
    degrees = np.concatenate([np.arange(330.0, 360.0), np.arange(0.0, 41.0)])
    columns = longitude_columns(degrees, HOUR, np.asarray, dtype=np.float64)
    assert columns is not None
    radians = np.deg2rad(degrees)
    np.testing.assert_allclose(
        columns.harmonics, [np.ones_like(radians), np.cos(radians), np.sin(radians)]
    )


@pytest.mark.parametrize("degrees", [np.zeros(40), np.array([0.0, 120.0, 240.0])])
def test_a_grid_whose_runs_take_a_third_of_it_has_none(degrees: np.ndarray) -> None:
    """One longitude repeated (every column in every run), or three 120 degrees apart
    (runs of two columns): the sun's forcings are then computed point by point."""
    assert longitude_columns(degrees, HOUR, np.asarray) is None
