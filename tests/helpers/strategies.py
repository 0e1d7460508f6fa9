"""Hypothesis strategies for geometries, sample specs and loader configurations, and the
stored form of the chunks they describe."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from insitubatch_nodes.core.axis_pick import AxisPick
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.sample_spec import SampleSpec, leads, window


@st.composite
def layouts(draw: st.DrawFn, num_samples: int, picks: bool = False) -> VariableLayout:
    """A layout; with `picks`, one that keeps some positions of one or more of its inner
    axes (levels and an area's rows and columns at once), if it has one."""
    inner_shape = draw(st.lists(st.integers(1, 7 if picks else 5), min_size=int(picks), max_size=3))
    inner_chunks = [draw(st.integers(1, s)) for s in inner_shape]
    sample_chunk = draw(st.integers(1, 9))
    chosen: list[AxisPick] = []
    if picks:
        axes = draw(st.sets(st.integers(1, len(inner_shape)), min_size=1))
        for axis in sorted(axes):
            kept = draw(st.sets(st.integers(0, inner_shape[axis - 1] - 1), min_size=1))
            chosen.append(AxisPick(axis, tuple(sorted(kept))))
    return VariableLayout(
        (num_samples, *inner_shape),
        (sample_chunk, *inner_chunks),
        draw(st.sampled_from(["float32", "int16", "float64"])),
        tuple(chosen),
    )


@st.composite
def geometries(draw: st.DrawFn, max_samples: int = 150, picks: bool = False) -> SampleGeometry:
    n = draw(st.integers(1, max_samples))
    count = draw(st.integers(1, 3))
    return SampleGeometry.from_layouts({f"v{i}": draw(layouts(n, picks)) for i in range(count)})


@st.composite
def window_and_lead_specs(draw: st.DrawFn, names: list[str]) -> SampleSpec | None:
    """No spec, or a spec of inputs over a window of 1 to 4 steps of every variable
    (group "x") and, at times, targets at up to two leads of 1 to 3 steps of the first
    (group "y"): the halos and offsets a read plan must place on any grid."""
    if draw(st.booleans()):
        return None
    groups = {"x": window(names, steps=draw(st.integers(1, 4)))}
    ahead = draw(st.lists(st.integers(1, 3), max_size=2, unique=True))
    if ahead:
        groups["y"] = leads(names[:1], sorted(ahead))
    return SampleSpec(groups)


def counting_arrays(geometry: SampleGeometry) -> dict[str, np.ndarray]:
    """Each variable's values as their flat positions in it: every element distinct and
    >= 0, so a value found in a buffer says which stored element it came from, and the
    padding `stored_chunk` adds (-1) is never taken for one."""
    return {
        name: np.arange(np.prod(layout.shape), dtype=np.int64).reshape(layout.shape)
        for name, layout in geometry.variables.items()
    }


def stored_chunk(source: np.ndarray, layout: VariableLayout, coords: tuple[int, ...]) -> np.ndarray:
    """Chunk `coords` as a store holds it: always the full chunk shape, the part past the
    array's edge padded with a value no real element has (-1; the sources are >= 0)."""
    stored = np.full(layout.chunks, -1, dtype=source.dtype)
    origin = [i * c for i, c in zip(coords, layout.chunks, strict=True)]
    part = source[tuple(slice(o, o + c) for o, c in zip(origin, layout.chunks, strict=True))]
    stored[tuple(slice(0, n) for n in part.shape)] = part
    return stored
