"""Pressure levels picked by value, as weather code picks them (`ds.sel(level=[500, 850])`).

A user knows levels by their value in hPa, not by their position among 13 or 37: this
turns the values asked for into the positions of the level coordinate (`AxisPick`),
labelled by their values so that channels are named `temperature_500`. Channels come in
the order the list was written, as `ds.sel` gives them, whichever order the store keeps
its levels in (the current ERA5 layout stores them descending, 1000 ... 1 hPa); a level
asked twice comes twice, as in `ds.sel`. The reader still keeps the positions sorted and
once each: it keeps only those of each chunk it decodes, and reads no chunk that holds none
of them (`read_plan.chunk_regions`); the gather puts them in the asked order
(`AxisPick.order`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from insitubatch_nodes.core.axis_pick import AxisPick


def value_text(value: object) -> str:
    """A coordinate value as a channel name's suffix: 500, 0.5, "surface".

    Args:
        value: one value of the level coordinate.
    """
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def pick_levels(
    variable: str,
    axis: int,
    coordinate: str,
    values: np.ndarray,
    wanted: Sequence[object],
) -> AxisPick:
    """The positions of `wanted` among the level coordinate's `values`, labelled by value:
    read in the store's order, held by a batch in the order of `wanted`.

    Args:
        variable: the variable, for messages.
        axis: its level axis.
        coordinate: the level coordinate's name, for messages.
        values: the coordinate's values (one per position along `axis`).
        wanted: the levels asked for, by value.
    """
    if isinstance(wanted, str | bytes) or not isinstance(wanted, Sequence | np.ndarray):
        raise TypeError(
            f"levels for {variable!r} must be a list of level values, e.g. [500, 850]; got "
            f"{wanted!r}"
        )
    asked = list(wanted)
    if not asked:
        raise ValueError(f"levels for {variable!r} is empty: give at least one level value")
    shown = [value_text(v) for v in values]
    positions = []
    for value in asked:
        if isinstance(value, bool) or not np.isscalar(value):
            raise TypeError(
                f"levels for {variable!r} must be level values such as 500 or 850.0; got "
                f"{value!r} ({type(value).__name__})"
            )
        found = np.flatnonzero(np.asarray(values) == value)
        if found.size == 0:
            raise ValueError(
                f"level {value!r} is not in {variable!r}'s {coordinate!r} coordinate "
                f"({', '.join(shown)}); pick levels from those values"
            )
        positions.append(int(found[0]))
    kept = sorted(set(positions))
    place = {position: k for k, position in enumerate(kept)}
    order = () if positions == kept else tuple(place[p] for p in positions)
    return AxisPick(axis, tuple(kept), tuple(shown[i] for i in kept), order)
