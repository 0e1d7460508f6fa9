"""Hypothesis strategies for geometries and loader configurations."""

from __future__ import annotations

from hypothesis import strategies as st

from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout


@st.composite
def layouts(draw: st.DrawFn, num_samples: int) -> VariableLayout:
    inner_shape = draw(st.lists(st.integers(1, 5), min_size=0, max_size=2))
    inner_chunks = [draw(st.integers(1, s)) for s in inner_shape]
    sample_chunk = draw(st.integers(1, 9))
    return VariableLayout(
        (num_samples, *inner_shape),
        (sample_chunk, *inner_chunks),
        draw(st.sampled_from(["float32", "int16", "float64"])),
    )


@st.composite
def geometries(draw: st.DrawFn, max_samples: int = 150) -> SampleGeometry:
    n = draw(st.integers(1, max_samples))
    count = draw(st.integers(1, 3))
    return SampleGeometry.from_layouts({f"v{i}": draw(layouts(n)) for i in range(count)})
