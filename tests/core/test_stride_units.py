"""The units a stride is dealt in (`core.stride_units`), against brute force: every unit
holding an anchor holds the same number of the steps 0, k, 2k, ..., the units stay whole
numbers of the grid's (so chunk-aligned grids stay aligned), and they are the grid's own
unless the stride is shorter than a unit and does not divide it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from insitubatch_nodes.core.stride_units import (
    AT_MOST_ONE,
    FITS,
    LEAST_COMMON_MULTIPLE,
    stride_units,
)


def anchors_per_unit(unit_steps: int, stride: int, num_steps: int) -> set[int]:
    """How many multiples of `stride` each whole unit of `unit_steps` holds, over the
    units holding at least one."""
    whole = num_steps // unit_steps * unit_steps
    counts = (np.arange(whole) % stride == 0).reshape(-1, unit_steps).sum(axis=1)
    return set(counts[counts > 0].tolist())


@given(grid_steps=st.integers(1, 60), stride=st.integers(1, 60))
def test_every_unit_with_an_anchor_holds_as_many(grid_steps: int, stride: int) -> None:
    chosen = stride_units(grid_steps, stride)
    assert chosen.unit_steps % grid_steps == 0
    span = 4 * math.lcm(chosen.unit_steps, stride)
    assert anchors_per_unit(chosen.unit_steps, stride, span) == {chosen.anchors_per_unit}
    if chosen.unit_steps != grid_steps:  # the grid's own would not do: its units differ
        assert chosen.rule == LEAST_COMMON_MULTIPLE
        assert len(anchors_per_unit(grid_steps, stride, span)) > 1
        assert chosen.unit_steps == math.lcm(grid_steps, stride)


@pytest.mark.parametrize(
    ("grid_steps", "stride", "unit_steps", "rule"),
    [
        (4, 2, 4, FITS),
        (24, 6, 24, FITS),
        (4, 4, 4, FITS),
        (4, 3, 12, LEAST_COMMON_MULTIPLE),  # 2, 1, 1 anchors in units of 4
        (5, 2, 10, LEAST_COMMON_MULTIPLE),
        (24, 5, 120, LEAST_COMMON_MULTIPLE),
        (4, 6, 4, AT_MOST_ONE),  # units of 4 hold anchor 0, 6 (in 4..7) or none (8..11)
        (5, 24, 5, AT_MOST_ONE),
        (4, 8, 4, AT_MOST_ONE),
        (1, 3, 1, AT_MOST_ONE),
    ],
)
def test_the_units_chosen(grid_steps: int, stride: int, unit_steps: int, rule: str) -> None:
    chosen = stride_units(grid_steps, stride)
    assert (chosen.unit_steps, chosen.rule) == (unit_steps, rule)
    assert f"units of {unit_steps} steps" in chosen.text()


@given(grid_steps=st.integers(1, 60), stride=st.integers(1, 60), revisits=st.integers(1, 4))
def test_the_revisits_named_instead_fit_the_stride(
    grid_steps: int, stride: int, revisits: int
) -> None:
    """The alternative a budget refusal names: revisits of the store's unit whose visits
    are at most a stride long (one anchor or none each), as long as such visits can be."""
    chosen = stride_units(grid_steps, stride, revisits)
    other = chosen.revisits_alternative()
    if chosen.rule != LEAST_COMMON_MULTIPLE:
        assert other is None and chosen.memory_hint() == ""
        return
    assert other is not None
    more_revisits, visit = other
    store_unit = grid_steps * revisits
    assert store_unit % more_revisits == 0 and store_unit // more_revisits == visit
    assert visit <= stride
    assert not any(grid_steps % d == 0 for d in range(visit + 1, stride + 1))
    finer = stride_units(visit, stride, more_revisits)
    assert finer.unit_steps == visit and finer.anchors_per_unit == 1
    assert f"revisits={more_revisits} deals it in units of {visit} step" in chosen.memory_hint()


def test_the_text_says_why() -> None:
    assert stride_units(4, 3).text() == (
        "units of 12 steps: a stride of 3 steps does not divide units of 4 steps, so units "
        "are their least common multiple, each holding 4 anchors (3x the memory of a unit "
        "of 4; revisits=2 would deal it in units of 2 steps, one anchor or none each, for "
        "more reads)"
    )
    assert stride_units(24, 5, revisits=2).memory_hint() == (
        "a stride of 5 steps is dealt in units of 120 steps, 5x the memory of a unit of 24; "
        "revisits=12 deals it in units of 4 steps, one anchor or none each, for less memory "
        "and more reads"
    )
    assert "each unit holds one anchor or none" in stride_units(4, 6).text()
    assert stride_units(24, 6).text() == (
        "units of 24 steps, each holding 4 anchors of a stride of 6"
    )


def test_lengths_below_one_are_refused() -> None:
    with pytest.raises(ValueError, match="both must be >= 1"):
        stride_units(0, 3)
