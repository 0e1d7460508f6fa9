"""The unit grid's phase: where on the sample axis the first full unit starts.

One store's chunks start at its step 0, so units of whole chunks start there too. On a
join (`core.time_join`) each store's sample axis starts at its own *origin* inside its
stored steps, so a store whose chunks are longer than one step may have its chunk
boundaries anywhere on the joined axis: a pressure-level store chunked 24 steps that
starts 8 steps before the surface store has them at joined steps 16, 40, 64, ... With
units at 0, 24, 48, ... each of its chunks would straddle two units and be read twice
an epoch (once per unit, keeping that unit's rows).

So the units are laid at a *phase* p: for p > 0, unit 0 is the short run [0, p) and
unit k >= 1 the steps [p + (k - 1) L, p + k L) (L the unit length); for p = 0, unit k is
[k L, (k + 1) L) as always; the last one is cut at the axis' end.
A store of chunk length c and origin o has a chunk boundary at joined step t when
t + o is a multiple of c; the boundaries the units and its chunks can share are those of
g = gcd(c, L), and all of them are shared when p = -o (mod g). Then a chunk holds whole
units (c a multiple of L) or a unit holds whole chunks (L a multiple of c): each chunk
is read once per visit of it, as on one store. A store chunked 1 step (g = 1) fits any
phase.

THE RULE: the stores' conditions are met one by one, the costliest first (the bytes of
one sample-axis chunk, all its inner chunks, of every variable that shares the
condition: what a chunk straddling a unit boundary decodes once more), each kept only
when it agrees with those already met (two chunkings whose boundaries cannot both be
unit boundaries: the one decoding more bytes per chunk is read once); p is the least
step that meets them. A store whose map jumps over another store's hole (`core.step_runs`) has,
past each jump, its chunk boundaries at another offset: each run is a condition of its
own, weighed by its steps, so the longest runs of the costliest chunks are read once.
It is a pure function of the layouts and the unit length, never of the host, so every
rank cuts the same units. A single store, and a join whose stores start at chunk
boundaries, get p = 0: the grid they always had.

The functions after `unit_phase` are the one place steps and units are turned into each
other on such a grid (`SampleGeometry` and `SplitManifest` ask them).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np


def unit_phase(chunkings: Iterable[tuple[int, int, int]], unit_length: int) -> int:
    """The phase (0 <= p < `unit_length`) at which the most costly chunkings' boundaries
    are unit boundaries (see THE RULE above).

    Args:
        chunkings: per variable, or per run of a variable's map, `(chunk, offset,
            cost)`: its sample-axis chunk length, its stored step less its joined step
            (the origin, for a map of one run), and its cost: the bytes of one of its
            sample-axis chunks (all its inner chunks) times the joined steps it covers.
        unit_length: steps per unit.
    """
    if unit_length < 1:
        raise ValueError(f"unit_length must be >= 1, got {unit_length}")
    costs: dict[tuple[int, int], int] = {}
    for chunk, offset, cost in chunkings:
        shared = math.gcd(chunk, unit_length)
        if shared > 1:
            key = (shared, -offset % shared)
            costs[key] = costs.get(key, 0) + cost
    residue, modulus = 0, 1
    for (shared, wanted), _ in sorted(costs.items(), key=lambda item: (-item[1], item[0])):
        met = _both(residue, modulus, wanted, shared)
        if met is not None:
            residue, modulus = met
    return residue % unit_length


def _both(a: int, m: int, b: int, n: int) -> tuple[int, int] | None:
    """The steps t with t = a (mod m) and t = b (mod n), as (least t >= 0, their
    modulus), or None when no step meets both."""
    common = math.gcd(m, n)
    if (b - a) % common:
        return None
    modulus = m // common * n
    # t = a + m * k with m * k = b - a (mod n): k = (b - a) / common * inverse(m / common)
    k = (b - a) // common * pow(m // common, -1, n // common) % (n // common)
    return (a + m * k) % modulus, modulus


def lead_steps(unit_length: int, phase: int) -> int:
    """The steps unit 0 lacks before step 0: unit u starts at `u * unit_length - lead`
    (cut at 0), so `(step + lead) // unit_length` is a step's unit.

    Args:
        unit_length: steps per full unit.
        phase: the step where the first full unit starts.
    """
    return -phase % unit_length


def unit_count(num_samples: int, unit_length: int, phase: int) -> int:
    """Units on an axis of `num_samples` steps, the short ones at both ends included.

    Args:
        num_samples: steps along the axis.
        unit_length: steps per full unit.
        phase: the step where the first full unit starts.
    """
    return -(-(num_samples + lead_steps(unit_length, phase)) // unit_length)


def units_of(steps: np.ndarray, unit_length: int, phase: int) -> np.ndarray:
    """The unit each step lies in.

    Args:
        steps: steps of the axis (int64).
        unit_length: steps per full unit.
        phase: the step where the first full unit starts.
    """
    return (np.asarray(steps, dtype=np.int64) + lead_steps(unit_length, phase)) // unit_length


def unit_bounds(
    units: np.ndarray, unit_length: int, phase: int, num_samples: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's first step and the step after its last, cut at the axis' ends.

    Args:
        units: unit ids (int64), in any order.
        unit_length: steps per full unit.
        phase: the step where the first full unit starts.
        num_samples: steps along the axis.
    """
    starts = np.asarray(units, dtype=np.int64) * unit_length - lead_steps(unit_length, phase)
    stops = np.minimum(starts + unit_length, num_samples)
    return np.maximum(starts, 0), stops
