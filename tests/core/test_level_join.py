"""`core.level_join` against xarray: the levels a join reads every variable at are the
ones `xr.merge(join=...)` aligns the holders' level coordinates on, in its order, and a
join it refuses (or that keeps nothing) is refused."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.level_join import join_levels

POOL = [1000, 925, 850, 700, 500, 300, 250, 50]
level_lists = st.lists(st.sampled_from(POOL), min_size=1, max_size=5, unique=True)


def merged_levels(held: list[list[int]], join: str) -> list[int]:
    """What xr.merge makes of Datasets holding these level coordinates."""
    datasets = [
        xr.Dataset({f"v{i}": ("level", np.zeros(len(values)))}, coords={"level": values})
        for i, values in enumerate(held)
    ]
    return xr.merge(datasets, join=join).level.values.tolist()


@settings(max_examples=200, deadline=None)
@given(held=st.lists(level_lists, min_size=2, max_size=3), join=st.sampled_from(["exact", "inner"]))
def test_the_levels_are_those_xarray_merge_aligns_on(held: list[list[int]], join: str) -> None:
    labelled = [(f"store {i}", values) for i, values in enumerate(held)]
    try:
        expected: list[int] | None = merged_levels(held, join)
    except ValueError:
        expected = None
    if expected is None or not expected:
        with pytest.raises(ValueError, match=r"'level' coordinates of|no 'level' value in common"):
            join_levels("level", labelled, join, "stores", "select the same levels")
        return
    kept = join_levels("level", labelled, join, "stores", "select the same levels")
    assert (held[0] if kept is None else kept) == expected
    assert (kept is None) == all(values == held[0] for values in held)


def test_the_exact_refusal_names_the_first_values_that_differ() -> None:
    held = [("a.zarr", [500, 850]), ("b.zarr", [500, 700, 850])]
    with pytest.raises(ValueError) as refused:
        join_levels("level", held, "exact", "stores", "pass levels=")
    text = str(refused.value)
    assert "a.zarr holds [500, 850] and b.zarr holds [500, 700, 850]" in text
    assert "first at position 1 (850 and 700)" in text and "pass levels=" in text
