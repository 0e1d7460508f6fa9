"""A joined store's map from the joined time axis to its own stored steps, in runs.

An inner join keeps the dates every store holds (`core.time_join`). A store that holds a
date inside the shared period which another store lacks (a *hole* in the other) keeps
its steps on both sides of it, and the joined axis goes from the one to the other: the
store's stored steps for the joined axis are then runs of consecutive steps, jumping
over the steps the join left out, as `xr.merge(join="inner")` then `isel` reads them.

A map is the first run's stored step (`VariableLayout.origin`) and, per later run, the
pair (joined step where it starts, its stored step): `runs`, empty for one run. Every
step is found with one `searchsorted` over the runs' starts, for a whole block's steps
at once.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Runs = tuple[tuple[int, int], ...]


def check_runs(runs: Sequence[Sequence[int]], origin: int, length: int, stored: int) -> Runs:
    """`runs` as plain ints, after checking they are a map of `length` joined steps into
    `stored` steps: each run starts after the one before on both axes, jumps over at
    least one stored step, and the last one ends inside the array.

    Args:
        runs: per run after the first, (joined step where it starts, its stored step).
        origin: the first run's stored step.
        length: steps of the joined axis.
        stored: steps the array holds.
    """
    plain = tuple((int(j), int(s)) for j, s in runs)
    if origin < 0:
        raise ValueError(f"a map's first stored step must be >= 0, got {origin}")
    joined, steps = 0, origin
    for j, s in plain:
        if not (joined < j < length and s - steps > j - joined):
            raise ValueError(
                f"the runs {[list(r) for r in plain]} of a map of {length} joined steps from "
                f"stored step {origin} must each start later on both axes and leave out at "
                f"least one stored step"
            )
        joined, steps = j, s
    if steps + length - joined > stored:
        raise ValueError(
            f"a map of {length} joined steps whose last run starts at stored step {steps} "
            f"(joined step {joined}) ends past the array's {stored} steps"
        )
    return plain


def run_index(steps: np.ndarray, runs: Runs) -> np.ndarray:
    """The run each joined step lies in (0 for the first).

    Args:
        steps: joined steps (int64).
        runs: the map's later runs (`check_runs`).
    """
    starts = np.array([j for j, _ in runs], dtype=np.int64)
    return np.searchsorted(starts, np.asarray(steps, dtype=np.int64), side="right")


def stored_steps(steps: np.ndarray, origin: int, runs: Runs) -> np.ndarray:
    """Each joined step's stored step.

    Args:
        steps: joined steps (int64).
        origin: the first run's stored step.
        runs: the map's later runs.
    """
    steps = np.asarray(steps, dtype=np.int64)
    if not runs:
        return steps + origin
    shift = np.array([origin, *(s - j for j, s in runs)], dtype=np.int64)
    return steps + shift[run_index(steps, runs)]


def stored_end(origin: int, length: int, runs: Runs) -> int:
    """The stored step after the map's last.

    Args:
        origin: the first run's stored step.
        length: steps of the joined axis.
        runs: the map's later runs.
    """
    joined, steps = runs[-1] if runs else (0, origin)
    return steps + length - joined


def most_run_starts(runs: Runs, window: int) -> int:
    """The most run starts (jumps over left-out steps) any `window` consecutive joined
    steps hold: the extra pieces a unit's reads may be cut into.

    Args:
        runs: the map's later runs.
        window: joined steps (>= 1).
    """
    starts = np.array([j for j, _ in runs], dtype=np.int64)
    if starts.size == 0:
        return 0
    inside = np.searchsorted(starts, starts + window - 1, side="left") - np.arange(starts.size)
    return int(inside.max())
