"""Where samples live: the sample axis (axis 0) of several aligned arrays, cut into units.

A *unit* is by default the smallest run of samples whose boundaries are chunk boundaries of
every variable at once (the least common multiple of their sample-axis chunk lengths).
Shuffling, splitting and rank partitioning all work on whole units, so then no chunk is
read twice in an epoch, however differently the variables are chunked.

Misaligned chunkings (5, 7 and 12 steps make one unit of 420) can leave too few units for
the splits and ranks; units then fall back to the *fine grid*, the shortest chunk length
(`core.unit_grid`). A chunk that straddles two units is then read for each, keeping only
the rows that unit needs (`core.read_plan`). Revisits cut units finer still
(`SampleGeometry.visits`).

On a join of stores the units start at a *phase* (`core.unit_phase`): unit 0 is the
short run before it, so that a store whose chunks start elsewhere than the joined axis'
first step still has its chunk boundaries on unit boundaries.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from insitubatch_nodes.core.axis_pick import AxisPick
from insitubatch_nodes.core.step_runs import Runs, check_runs, stored_steps
from insitubatch_nodes.core.unit_phase import (
    lead_steps,
    unit_bounds,
    unit_count,
    unit_phase,
    units_of,
)


@dataclass(frozen=True)
class VariableLayout:
    """Shape, chunk shape and dtype of one array: all the index math needs to know of it.

    Args:
        shape: the stored array's shape.
        chunks: its (inner, when sharded) chunk shape.
        dtype: its element type, as numpy spells it.
        picks: positions kept along some inner axes, at most one pick per axis (levels by
            value on the level axis, an area's rows and columns on the grid's axes,
            `core.area`), in increasing axis order; empty to keep every position.
        origin: the stored step that is step 0 of the loader's sample axis. Stores joined
            on time (`io.joined_source`) cover different dates: each variable's steps are
            its own stored steps shifted by its store's origin, so its chunk boundaries
            fall anywhere on the joined axis.
        length: steps of the loader's sample axis this array covers from `origin`, or
            None for the rest of the array (`shape[0] - origin`).
        runs: where the map from the sample axis to stored steps jumps over steps an
            inner join left out (a date inside the shared period another store lacks):
            per later run, (its first step of the sample axis, its stored step); empty
            for one run from `origin` (`core.step_runs`). Needs `length`.
    """

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str
    picks: tuple[AxisPick, ...] = ()
    origin: int = 0
    length: int | None = None
    runs: Runs = ()

    def __post_init__(self) -> None:
        if len(self.shape) < 1:
            raise ValueError(
                "a variable needs at least one axis (the sample axis); got a 0-d array"
            )
        if len(self.chunks) != len(self.shape):
            raise ValueError(f"chunks {self.chunks} do not match shape {self.shape}")
        if any(c < 1 for c in self.chunks):
            raise ValueError(f"chunk lengths must be >= 1, got {self.chunks}")
        axes = [pick.axis for pick in self.picks]
        if any(a >= b for a, b in itertools.pairwise(axes)):
            raise ValueError(
                f"picks must name distinct axes in increasing order, one pick per axis; got "
                f"axes {axes}"
            )
        for pick in self.picks:
            self._check_pick(pick)
        if self.runs:
            if self.length is None:
                raise ValueError("a map of runs (runs=) needs the sample axis' length")
            runs = check_runs(self.runs, self.origin, self.length, self.shape[0])
            object.__setattr__(self, "runs", runs)
            return
        end = self.origin + self.sample_length
        if self.origin < 0 or self.sample_length < 0 or end > self.shape[0]:
            raise ValueError(
                f"a sample axis of {self.sample_length} steps from stored step {self.origin} "
                f"does not lie within the array's {self.shape[0]} steps"
            )
        if self.length is not None and end == self.shape[0]:
            object.__setattr__(self, "length", None)  # one spelling of "to the end"

    @property
    def sample_length(self) -> int:
        """Steps of the loader's sample axis (the array's own, unless joined)."""
        return self.shape[0] - self.origin if self.length is None else self.length

    @property
    def shifted(self) -> bool:
        """Whether the loader's steps are not the array's own (a join: `origin`, `length`,
        `runs`)."""
        return self.origin != 0 or self.length is not None

    def stored_steps(self, steps: np.ndarray) -> np.ndarray:
        """The stored step of each step of the loader's sample axis.

        Args:
            steps: steps of the sample axis (int64).
        """
        return stored_steps(steps, self.origin, self.runs)

    def _check_pick(self, pick: AxisPick) -> None:
        if not 1 <= pick.axis < len(self.shape):
            raise ValueError(
                f"a pick must be along an inner axis (1..{len(self.shape) - 1} of shape "
                f"{self.shape}), got axis {pick.axis}"
            )
        size = self.shape[pick.axis]
        ordered = all(a < b for a, b in itertools.pairwise(pick.indices))
        if not pick.indices or not ordered or not 0 <= pick.indices[0] <= pick.indices[-1] < size:
            raise ValueError(
                f"picked positions along axis {pick.axis} must be strictly increasing, "
                f"within 0..{size - 1}, and at least one; got {list(pick.indices)}"
            )
        if pick.labels and len(pick.labels) != len(pick.indices):
            raise ValueError(
                f"a pick has {len(pick.labels)} labels for {len(pick.indices)} positions; "
                f"give one per position, or none"
            )
        if pick.order and sorted(set(pick.order)) != list(range(len(pick.indices))):
            raise ValueError(
                f"a pick's order must name each of its {len(pick.indices)} kept positions "
                f"by its place (0..{len(pick.indices) - 1}) at least once, and nothing "
                f"else; got {list(pick.order)}"
            )

    def pick_on(self, axis: int) -> AxisPick | None:
        """The pick along `axis`, or None when every position of it is kept.

        Args:
            axis: an array axis.
        """
        return next((pick for pick in self.picks if pick.axis == axis), None)

    def with_picks(self, picks: Iterable[AxisPick]) -> VariableLayout:
        """This layout with `picks` added to its own (each on an axis not picked yet).

        Args:
            picks: more picks, in any order.
        """
        merged = sorted((*self.picks, *picks), key=lambda pick: pick.axis)
        return replace(self, picks=tuple(merged))

    @property
    def reordering(self) -> tuple[AxisPick, ...]:
        """The picks a batch holds in another order than a block (the gather reorders
        them, `core.batch_fields`)."""
        return tuple(pick for pick in self.picks if pick.reorders)

    @property
    def sample_shape(self) -> tuple[int, ...]:
        """One sample's shape as a block holds it: the array's inner axes, each picked one
        cut to its picks."""
        shape = list(self.shape[1:])
        for pick in self.picks:
            shape[pick.axis - 1] = len(pick.indices)
        return tuple(shape)

    @property
    def batch_sample_shape(self) -> tuple[int, ...]:
        """One sample's shape as a batch holds it: each picked axis as long as the order
        asked for (longer than the block's when a position is asked twice)."""
        shape = list(self.sample_shape)
        for pick in self.picks:
            shape[pick.axis - 1] = len(pick.places)
        return tuple(shape)

    @property
    def sample_chunk(self) -> int:
        return self.chunks[0]

    def inner_chunk_grid(self) -> list[tuple[int, ...]]:
        """Every chunk coordinate of the inner (non-sample) axes that holds kept data, in
        C order."""
        return list(itertools.product(*self.inner_chunk_ranges()))

    def inner_chunk_ranges(self) -> list[list[int]]:
        """Per inner axis, the chunk indices along it that hold kept data."""
        ranges = [
            list(range(math.ceil(s / c)))
            for s, c in zip(self.shape[1:], self.chunks[1:], strict=True)
        ]
        for pick in self.picks:
            chunk = self.chunks[pick.axis]
            ranges[pick.axis - 1] = sorted({i // chunk for i in pick.indices})
        return ranges

    def chunk_selection(self, coords: tuple[int, ...]) -> tuple[slice, ...]:
        """The index region chunk `coords` covers (clipped at the array's edge)."""
        return tuple(
            slice(i * c, min((i + 1) * c, s))
            for i, c, s in zip(coords, self.chunks, self.shape, strict=True)
        )

    def to_json(self) -> dict[str, object]:
        """The stored array's shape, chunks and dtype (what a manifest records of the
        store; picks are the loader's choice, not the store's), and on a join where the
        sample axis lies in it (the dates the stores share decide that)."""
        found: dict[str, object] = {
            "shape": list(self.shape),
            "chunks": list(self.chunks),
            "dtype": self.dtype,
        }
        if self.shifted:
            found.update(origin=self.origin, length=self.sample_length)
        if self.runs:
            found.update(runs=[list(run) for run in self.runs])
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> VariableLayout:
        shape = data["shape"]
        chunks = data["chunks"]
        assert isinstance(shape, list) and isinstance(chunks, list)
        origin, length, runs = data.get("origin", 0), data.get("length"), data.get("runs", [])
        assert isinstance(origin, int) and (length is None or isinstance(length, int))
        assert isinstance(runs, list) and all(isinstance(r, list) and len(r) == 2 for r in runs)
        return cls(
            tuple(int(s) for s in shape),
            tuple(int(c) for c in chunks),
            str(data["dtype"]),
            origin=int(origin),
            length=None if length is None else int(length),
            runs=tuple((int(j), int(s)) for j, s in runs),
        )


class UnitSamples(Protocol):
    """Which samples each unit holds: all the partition and draw order need to know.

    `SampleGeometry` holds every time step of a unit; `core.anchors.AnchorSet` holds only
    the anchors whose windows stay inside the split.
    """

    @property
    def unit_length(self) -> int: ...

    def unit_sizes(self, units: np.ndarray) -> np.ndarray: ...

    def unit_samples(self, units: np.ndarray) -> np.ndarray: ...


@dataclass(frozen=True)
class SampleGeometry:
    """The variables a loader reads, aligned on axis 0, and the unit grid over that axis.

    Args:
        variables: the variables' layouts, by name.
        unit_length: steps per full unit.
        phase: the step where the first full unit starts (0 <= phase < unit_length); unit
            0 is then the short run of steps before it (`core.unit_phase`). 0 but on a
            join whose stores' chunks start elsewhere than the joined axis' first step.
    """

    variables: Mapping[str, VariableLayout]
    unit_length: int
    phase: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.phase < self.unit_length:
            raise ValueError(
                f"a unit grid's phase must lie in 0..{self.unit_length - 1} (the step where "
                f"its first full unit of {self.unit_length} starts), got {self.phase}"
            )

    @classmethod
    def from_layouts(
        cls,
        variables: Mapping[str, VariableLayout],
        unit_length: int | None = None,
        *,
        finest: int | None = None,
        phase: int | None = None,
    ) -> SampleGeometry:
        """Check the variables line up on the sample axis and pick the unit length.

        Args:
            variables: the variables' layouts, by name.
            unit_length: steps per unit: a multiple of every sample-axis chunk length, or
                the fine grid (`finest`); None for their least common multiple.
            finest: the fine grid's unit length, when it was cut for more variables than
                these (a manifest's: `SplitManifest.geometry_for`); None for the shortest
                chunk length of `variables`.
            phase: where the first full unit starts, when it was chosen for more
                variables than these (a manifest's); None for the phase that puts the
                costliest chunkings' boundaries on unit boundaries (`core.unit_phase`).
        """
        if not variables:
            raise ValueError("no variables selected: name at least one array to load")
        lengths = {name: layout.sample_length for name, layout in variables.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(
                "variables must have the same length along the sample axis (axis 0), got "
                + ", ".join(f"{n}={v}" for n, v in lengths.items())
                + "; select variables that share a time axis"
            )
        lcm = math.lcm(*(layout.sample_chunk for layout in variables.values()))
        if finest is None:
            finest = min(layout.sample_chunk for layout in variables.values())
        if unit_length is None:
            unit_length = lcm
        elif unit_length < 1 or (unit_length % lcm and unit_length != finest):
            raise ValueError(
                f"unit length {unit_length} is not a multiple of every variable's sample-axis "
                f"chunk length (their least common multiple is {lcm}), nor the fine grid of "
                f"the shortest chunk length ({finest})"
            )
        if phase is None:
            phase = unit_phase(
                (
                    (layout.sample_chunk, offset, _chunk_bytes(layout) * steps)
                    for layout in variables.values()
                    for offset, steps in _run_offsets(layout)
                ),
                unit_length,
            )
        return cls(dict(variables), unit_length, phase)

    def visits(self, revisits: int) -> SampleGeometry:
        """The grid of `revisits` visits per unit: each unit cut into `revisits` equal runs
        of steps, each a unit of its own. An epoch then reads each chunk once per visit,
        keeping only that visit's rows, so a pool of units holding the same memory spans
        `revisits` times as many of the store's units.

        Args:
            revisits: visits per unit (an int >= 1 dividing the unit length).
        """
        if revisits < 1 or self.unit_length % revisits:
            divisors = [k for k in range(1, self.unit_length + 1) if self.unit_length % k == 0]
            raise ValueError(
                f"revisits={revisits} must divide the unit length of {self.unit_length} steps "
                f"(each visit keeps an equal run of a unit's steps); use one of {divisors}"
            )
        visit = self.unit_length // revisits
        return SampleGeometry(self.variables, visit, self.phase % visit)

    def with_unit_length(self, unit_length: int) -> SampleGeometry:
        """This grid's units lengthened to `unit_length` steps (a multiple of its own: a
        stride's units, `core.stride_units`), starting at the same phase, so that every
        boundary of the new grid is one of this grid's.

        Args:
            unit_length: steps per unit, a multiple of `self.unit_length`.
        """
        if unit_length % self.unit_length:
            raise ValueError(
                f"units of {unit_length} steps are not whole units of {self.unit_length}"
            )
        return SampleGeometry(self.variables, unit_length, self.phase)

    @property
    def num_samples(self) -> int:
        return next(iter(self.variables.values())).sample_length

    @property
    def lead(self) -> int:
        """The steps unit 0 lacks before step 0: a unit u starts at `u * unit_length -
        lead` (cut at 0), so `(step + lead) // unit_length` is a step's unit."""
        return lead_steps(self.unit_length, self.phase)

    @property
    def num_units(self) -> int:
        return unit_count(self.num_samples, self.unit_length, self.phase)

    def unit_of(self, steps: np.ndarray) -> np.ndarray:
        """The unit each step lies in.

        Args:
            steps: steps of the sample axis (int64).
        """
        return units_of(steps, self.unit_length, self.phase)

    def unit_bounds(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each unit's first step and the step after its last (cut at the axis' ends).

        Args:
            units: unit ids (int64), in any order.
        """
        return unit_bounds(units, self.unit_length, self.phase, self.num_samples)

    def unit_range(self, unit: int) -> tuple[int, int]:
        start, stop = self.unit_bounds(np.array([unit], dtype=np.int64))
        return int(start[0]), int(stop[0])

    def unit_sizes(self, units: np.ndarray) -> np.ndarray:
        """Samples in each unit (all full but the first, before the phase, and the array's
        last, which may be short)."""
        starts, stops = self.unit_bounds(units)
        return stops - starts

    def unit_samples(self, units: np.ndarray) -> np.ndarray:
        """Global sample indices of `units`, concatenated in the given unit order."""
        first, stops = self.unit_bounds(units)
        sizes = stops - first
        starts = np.repeat(first, sizes)
        offsets = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(
            np.cumsum(sizes) - sizes, sizes
        )
        return starts + offsets


def _chunk_bytes(layout: VariableLayout) -> int:
    """Bytes of one sample-axis chunk of every inner position: what a chunk straddling a
    unit boundary decodes once more (`core.unit_phase` aligns the costliest)."""
    return layout.sample_chunk * math.prod(layout.shape[1:]) * np.dtype(layout.dtype).itemsize


def _run_offsets(layout: VariableLayout) -> list[tuple[int, int]]:
    """Per run of the layout's map, its stored step less its joined step, and its steps."""
    starts = [0, *(j for j, _ in layout.runs)]
    offsets = [layout.origin, *(s - j for j, s in layout.runs)]
    stops = [*starts[1:], layout.sample_length]
    return [(o, b - a) for o, a, b in zip(offsets, starts, stops, strict=True)]
