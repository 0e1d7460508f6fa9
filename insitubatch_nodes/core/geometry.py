"""Where samples live: the sample axis (axis 0) of several aligned arrays, cut into units.

A *unit* is the smallest run of samples whose boundaries are chunk boundaries of every
variable at once (the least common multiple of their sample-axis chunk lengths). Shuffling,
splitting and rank partitioning all work on whole units, so no chunk is ever read twice in
an epoch, however differently the variables are chunked.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class VariableLayout:
    """Shape, chunk shape and dtype of one array: all the index math needs to know of it."""

    shape: tuple[int, ...]
    chunks: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        if len(self.shape) < 1:
            raise ValueError(
                "a variable needs at least one axis (the sample axis); got a 0-d array"
            )
        if len(self.chunks) != len(self.shape):
            raise ValueError(f"chunks {self.chunks} do not match shape {self.shape}")
        if any(c < 1 for c in self.chunks):
            raise ValueError(f"chunk lengths must be >= 1, got {self.chunks}")

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return self.shape[1:]

    @property
    def sample_chunk(self) -> int:
        return self.chunks[0]

    def inner_chunk_grid(self) -> list[tuple[int, ...]]:
        """Every chunk coordinate of the inner (non-sample) axes, in C order."""
        counts = [math.ceil(s / c) for s, c in zip(self.shape[1:], self.chunks[1:], strict=True)]
        return list(itertools.product(*(range(n) for n in counts)))

    def chunk_selection(self, coords: tuple[int, ...]) -> tuple[slice, ...]:
        """The index region chunk `coords` covers (clipped at the array's edge)."""
        return tuple(
            slice(i * c, min((i + 1) * c, s))
            for i, c, s in zip(coords, self.chunks, self.shape, strict=True)
        )

    def to_json(self) -> dict[str, object]:
        return {"shape": list(self.shape), "chunks": list(self.chunks), "dtype": self.dtype}

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> VariableLayout:
        shape = data["shape"]
        chunks = data["chunks"]
        assert isinstance(shape, list) and isinstance(chunks, list)
        return cls(tuple(int(s) for s in shape), tuple(int(c) for c in chunks), str(data["dtype"]))


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
    """The variables a loader reads, aligned on axis 0, and the unit grid over that axis."""

    variables: Mapping[str, VariableLayout]
    unit_length: int

    @classmethod
    def from_layouts(
        cls, variables: Mapping[str, VariableLayout], unit_length: int | None = None
    ) -> SampleGeometry:
        """Check the variables line up on the sample axis and pick the unit length."""
        if not variables:
            raise ValueError("no variables selected: name at least one array to load")
        lengths = {name: layout.shape[0] for name, layout in variables.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(
                "variables must have the same length along the sample axis (axis 0), got "
                + ", ".join(f"{n}={v}" for n, v in lengths.items())
                + "; select variables that share a time axis"
            )
        lcm = math.lcm(*(layout.sample_chunk for layout in variables.values()))
        if unit_length is None:
            unit_length = lcm
        elif unit_length < 1 or unit_length % lcm:
            raise ValueError(
                f"unit length {unit_length} is not a multiple of every variable's sample-axis "
                f"chunk length (their least common multiple is {lcm})"
            )
        return cls(dict(variables), unit_length)

    @property
    def num_samples(self) -> int:
        return next(iter(self.variables.values())).shape[0]

    @property
    def num_units(self) -> int:
        return math.ceil(self.num_samples / self.unit_length)

    def unit_range(self, unit: int) -> tuple[int, int]:
        start = unit * self.unit_length
        return start, min(start + self.unit_length, self.num_samples)

    def unit_sizes(self, units: np.ndarray) -> np.ndarray:
        """Samples in each unit (all full but the array's last, which may be ragged)."""
        starts = np.asarray(units, dtype=np.int64) * self.unit_length
        return np.minimum(starts + self.unit_length, self.num_samples) - starts

    def unit_samples(self, units: np.ndarray) -> np.ndarray:
        """Global sample indices of `units`, concatenated in the given unit order."""
        units = np.asarray(units, dtype=np.int64)
        sizes = self.unit_sizes(units)
        starts = np.repeat(units * self.unit_length, sizes)
        offsets = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(
            np.cumsum(sizes) - sizes, sizes
        )
        return starts + offsets
