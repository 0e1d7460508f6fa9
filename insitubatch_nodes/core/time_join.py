"""Stores joined on time: the joined time axis, and where it lies in each store.

A join reads each store in place, so a store's variables keep their own stored steps;
what the join decides is which of them the loader's sample axis holds. `"exact"` (the
default, as `xr.merge(..., join="exact")`) takes the stores only when every store with a
time axis has the same dates; `"inner"` keeps the dates every such store holds.

On the joined axis each store's kept steps start at an *origin*
(`core.geometry.VariableLayout.origin`) and run on as its own consecutive steps: the
common case of stores that cover different date ranges. A store holding a date inside the
shared period that another store lacks (a hole in the other) loses that date, as
`xr.merge(join="inner")` drops it, and its map jumps over it: its kept steps are runs
(`core.step_runs`, `VariableLayout.runs`). Stores without a time axis (static fields)
join by grid alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.date_ranges import TimeAxis
from insitubatch_nodes.core.step_runs import Runs

JOIN_POLICIES = ("exact", "inner")


@dataclass(frozen=True)
class JoinedTime:
    """The joined time axis and each store's place on it.

    Args:
        axis: the joined dates (the first store's name and calendar), one per step of
            the loader's sample axis.
        origins: per store, its stored step of the joined axis' first step; None for a
            store without a time axis.
        lost: per store, how many of its steps the join left out (0 without a time axis).
        runs: per store, where its map from the joined axis jumps over steps the join
            left out (`core.step_runs`): empty for one run, and without a time axis.
    """

    axis: TimeAxis
    origins: tuple[int | None, ...]
    lost: tuple[int, ...]
    runs: tuple[Runs, ...] = ()


def check_join_policy(join: object) -> str:
    """`join` when it names a policy this loader has, else an error naming them.

    Args:
        join: what the user passed as `join=`.
    """
    if join not in JOIN_POLICIES:
        raise ValueError(
            f"join={join!r} is not a way to align stores on time; use one of "
            f"{list(JOIN_POLICIES)}: 'exact' takes stores whose dates are equal, 'inner' the "
            f"dates every store holds"
        )
    return str(join)


def join_times(axes: Sequence[TimeAxis | None], stores: Sequence[str], join: str) -> JoinedTime:
    """Align the stores' time axes by value under `join`, or refuse naming the stores
    and the first dates that differ.

    Args:
        axes: per store, its decoded time axis, or None for a store without one.
        stores: per store, how messages name it (credentials redacted).
        join: `"exact"` or `"inner"` (`check_join_policy`).
    """
    timed = [(i, axis) for i, axis in enumerate(axes) if axis is not None]
    if not timed:
        raise ValueError(
            f"none of the joined stores {list(stores)} has a variable with a time axis; "
            f"name at least one time-varying variable"
        )
    first_at, first = timed[0]
    for i, axis in timed[1:]:
        if axis.calendar != first.calendar:
            raise ValueError(
                f"{stores[i]} counts its dates in the {axis.calendar!r} calendar and "
                f"{stores[first_at]} in {first.calendar!r}: dates of two calendars cannot be "
                f"matched; join stores of one calendar"
            )
    for i, axis in timed:
        if axis.dates.size > 1 and not np.all(axis.dates[1:] > axis.dates[:-1]):
            raise ValueError(
                f"the time coordinate {axis.name!r} of {stores[i]} does not increase step by "
                f"step; stores are joined on increasing dates"
            )
    if join == "exact":
        for i, axis in timed[1:]:
            _check_same_dates(first, axis, stores[first_at], stores[i])
        origins = tuple(None if axis is None else 0 for axis in axes)
        return JoinedTime(first, origins, tuple(0 for _ in axes), tuple(() for _ in axes))
    common = first.dates
    for _, axis in timed[1:]:
        common = np.intersect1d(common, axis.dates)
    if common.size == 0:
        spans = ", ".join(
            f"{stores[i]} {_text(axis, axis.dates[:1])}..{_text(axis, axis.dates[-1:])}"
            for i, axis in timed
        )
        raise ValueError(
            f"the joined stores share no date ({spans}); join stores that cover a common period"
        )
    origins_found: list[int | None] = []
    lost = []
    runs: list[Runs] = []
    for axis in axes:
        if axis is None:
            origins_found.append(None)
            lost.append(0)
            runs.append(())
            continue
        kept = np.searchsorted(axis.dates, common)  # common dates are the axis' own
        jumps = np.flatnonzero(np.diff(kept) != 1) + 1
        origins_found.append(int(kept[0]))
        lost.append(int(axis.dates.size - common.size))
        runs.append(tuple((int(j), int(kept[j])) for j in jumps))
    joined = TimeAxis(first.name, first.dates[np.searchsorted(first.dates, common)], first.calendar)
    return JoinedTime(joined, tuple(origins_found), tuple(lost), tuple(runs))


def _text(axis: TimeAxis, dates: np.ndarray) -> str:
    return ", ".join(axis.text(dates)) if dates.size else "(none)"


def _check_same_dates(first: TimeAxis, other: TimeAxis, first_store: str, other_store: str) -> None:
    """Refuse two axes whose dates differ, naming the first step where they do."""
    shared = min(first.dates.size, other.dates.size)
    differ = np.flatnonzero(first.dates[:shared] != other.dates[:shared])
    if differ.size == 0 and first.dates.size == other.dates.size:
        return
    step = int(differ[0]) if differ.size else shared
    both = [first.dates[step : step + 1], other.dates[step : step + 1]]
    shown = first.text(np.concatenate([d for d in both if d.size]))  # one unit for both
    here, there = (shown.pop(0) if d.size else "(none)" for d in both)
    raise ValueError(
        f"join='exact' needs the same dates in every store, and step {step} is {here} in "
        f"{first_store} but {there} in {other_store} ({first.dates.size} and "
        f"{other.dates.size} steps); pass join='inner' to keep the dates both hold, or "
        f"join stores of the same dates"
    )
