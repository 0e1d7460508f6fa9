"""A grid's columns of longitude as the sun's formulas take them on a grid of rows of
latitude and columns of longitude (`core.solar_geometry`'s `..._by_rows`).

There, the sunlight at a point is a function of its row (the sun's height terms, which
vary with latitude and time) and of the hour angle, H = G + lon, where G varies with time
only. Since cos(G + lon) = cos G cos lon - sin G sin lon, anything of the form
`alpha + beta cos H` is a sum of three products of a row's term and a column's:
`(alpha, beta cos G, -beta sin G)` per row, `(1, cos lon, sin lon)` per column (the
columns' `harmonics`), one contraction over the grid instead of several passes.

Where the sunlight is clipped (the sun below the horizon for part of an hour), it is not
such a sum: that happens, on every row, only within a fixed span of longitude around each
of two places that change with the row (sunrise and sunset). The columns there are a run
of the longitudes sorted round the circle. The circle is cut into `buckets` equal arcs,
twice as many as columns, and each arc keeps the first sorted column at or after its
start: a run starts at its western edge's arc's column (a multiply and a lookup, where a
binary search cost ten times as much) and is `window` columns long, the most any arc and
the span east of it hold on this grid (counted once, when the columns are made), plus one
against rounding. A run may wrap past 360 degrees: the sorted arrays go on past the end
with the first `window` columns again, a turn further.

Any order of longitudes works, and any spacing, duplicates included: a box across the
seam (`area=`) is stored eastward from its west, which is sorted once taken modulo 360.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

_TWO_PI = 2.0 * math.pi
_EDGE_SLACK = 1e-6  # radians: spans are counted this much longer, against rounding


@dataclass(frozen=True)
class LongitudeColumns:
    """A grid's columns: their harmonics, and their longitudes in the order they go round
    the circle; arrays in the namespace the arithmetic runs in.

    Args:
        harmonics: `(1, cos lon, sin lon)` of each column in the grid's order, shaped
            (3, columns), float32 (or the dtype asked for).
        sorted_radians: the longitudes in radians, modulo 2 pi, ascending (in the
            harmonics' dtype), then the first of them again plus 2 pi, as far as a run
            reaches (`window` more).
        columns: for each entry of `sorted_radians`, the grid column (position along the
            longitude axis) it is (int64), same length.
        starts: for each of the `buckets` arcs (and one more at 2 pi, which an edge
            rounded up reaches), the position in `sorted_radians` of the first column at
            or after the arc's start (int64).
        steps: 0 .. window - 1 (int64), a run's offsets from its first entry.
        count: the grid's columns.
        buckets: the arcs the circle is cut into.
        window: the most columns an arc and the `span` radians east of it (edges
            included) hold, plus one against rounding: how many a search's run takes.
        span: the span the window was counted for, radians.
    """

    harmonics: Any
    sorted_radians: Any
    columns: Any
    starts: Any
    steps: Any
    count: int
    buckets: int
    window: int
    span: float

    def search(self, xp: Any, western_edges: Any) -> tuple[Any, Any]:
        """The runs of columns from each western edge eastward: `(columns, radians)`, the
        grid columns and their longitudes (unwrapped: a run past the seam goes on beyond 2
        pi), shaped `(window, *edges)` for edges of any shape: a run's k-th column is at
        `[k, *edge]`, so arithmetic between the runs and terms of each edge broadcasts
        along the long trailing axes, not along a short run. Every column whose longitude
        lies within `span` east of an edge is in its run.

        Args:
            xp: the array namespace (numpy, or torch) of the columns and the edges.
            western_edges: radians in [0, 2 pi].
        """
        arcs = xp.asarray(western_edges * (self.buckets / _TWO_PI), dtype=xp.int64)
        first = self.starts[arcs]
        positions = first[None] + self.steps.reshape(-1, *([1] * first.ndim))
        return self.columns[positions], self.sorted_radians[positions]

    def nbytes(self) -> int:
        """Bytes the arrays hold."""
        extended = int(self.sorted_radians.shape[0])
        return 12 * self.count + 12 * extended + 8 * (self.buckets + 1) + 8 * self.window


def longitude_columns(
    longitude_degrees: np.ndarray,
    span: float,
    to_array: Callable[[np.ndarray], Any],
    dtype: Any = np.float32,
) -> LongitudeColumns | None:
    """The columns of a grid's 1-D longitudes, with runs long enough for spans of `span`
    radians, or None where the two runs of a row would take two thirds of it or more
    (every point is then as cheap to compute directly).

    Args:
        longitude_degrees: the longitude of each grid column, in degrees (any order).
        span: the span (radians) the searches will be for.
        to_array: a numpy array -> an array of the namespace the arithmetic runs in.
        dtype: the floats' dtype (the forcings' float32; float64 to test the arithmetic
            without rounding).
    """
    radians = np.deg2rad(np.asarray(longitude_degrees, np.float64).ravel())
    turned = np.remainder(radians, _TWO_PI)
    order = np.argsort(turned, kind="stable")
    ascending = turned[order]
    count = ascending.size
    twice = np.concatenate([ascending, ascending + _TWO_PI])
    buckets = 2 * count
    edges = np.arange(buckets + 1) * (_TWO_PI / buckets)  # each arc's start, and 2 pi
    starts = np.searchsorted(twice, edges - _EDGE_SLACK)
    ends = np.searchsorted(twice, edges + _TWO_PI / buckets + span + _EDGE_SLACK, side="right")
    window = int((ends - starts).max()) + 1
    if 3 * window > count:
        return None
    extended = int(starts.max()) + window
    harmonics = np.stack([np.ones_like(radians), np.cos(radians), np.sin(radians)])
    return LongitudeColumns(
        harmonics=to_array(harmonics.astype(dtype)),
        sorted_radians=to_array(twice[:extended].astype(dtype)),
        columns=to_array(np.concatenate([order, order])[:extended].astype(np.int64)),
        starts=to_array(starts.astype(np.int64)),
        steps=to_array(np.arange(window, dtype=np.int64)),
        count=count,
        buckets=buckets,
        window=window,
        span=span,
    )
