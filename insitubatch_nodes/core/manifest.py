"""Split manifests: which units belong to train, val, test, recorded against the store layout.

Splits are whole units so that a chunk never feeds two splits, and contiguous by default
so that neighbouring time steps (which are strongly correlated) do not leak from train into
validation. The manifest remembers the layout it was cut for, so a manifest reused on a
different or since-rewritten store is refused instead of silently mis-splitting it.

On a join whose units start at a phase (`core.unit_phase`) the manifest records it
(`phase`): its units are counted from the short unit 0 before it. Manifests of one store
never hold the field.

A manifest cut by dates (`core.date_manifest`) also holds `steps`: each split's [start,
stop) steps, which may end inside a unit. A unit at a date boundary is then listed by both
splits (each reads the chunk, and uses only its own steps as anchors), and the steps, not
the units, must be disjoint. Such a manifest records the dates each split holds and the
time coordinate it was cut on (`dates`, `time`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest_checks import (
    FIELDS,
    FIX_HINT,
    REQUIRED_FIELDS,
    check_disjoint,
    checked_layout,
    checked_phase,
    checked_ranges,
    fine_grid,
    is_int,
    layout_from_json,
    no_duplicate_keys,
    plain_data,
    positive_int,
    shown,
)
from insitubatch_nodes.core.seeding import rng_for
from insitubatch_nodes.core.unit_phase import unit_bounds, unit_count, units_of

MANIFEST_FORMAT = 1
DEFAULT_FRACTIONS: Mapping[str, float] = {"train": 0.8, "val": 0.1, "test": 0.1}
ALL_SPLIT = "all"
OPTIONAL_FIELDS = ("steps", "dates", "time", "phase")  # cut by dates; units at a phase
ANCHOR_RULE = (
    "a sample anchored at time t whose offsets span [lo, hi] (0 included) belongs to a split "
    "only if every step t+lo .. t+hi lies in one contiguous run of that split's units; "
    "anchors nearer a run's edge are left out (core.anchors)"
)


def units_to_ranges(units: np.ndarray) -> list[list[int]]:
    """Run-length encode sorted unit ids as [start, stop) pairs: a contiguous split is one pair.

    Args:
        units: unit ids, each once, in any order.
    """
    units = np.sort(np.asarray(units, dtype=np.int64))
    if units.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(units) != 1) + 1
    starts = np.concatenate([[0], breaks])
    stops = np.concatenate([breaks, [units.size]])
    return [[int(units[a]), int(units[b - 1]) + 1] for a, b in zip(starts, stops, strict=True)]


def _ranges_to_units(ranges: Sequence[Sequence[int]]) -> np.ndarray:
    if not ranges:
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([np.arange(a, b, dtype=np.int64) for a, b in ranges])


@dataclass(frozen=True)
class SplitManifest:
    """Unit ranges per split plus the store layout they were computed for; `phase` is the
    step where the first full unit starts (`SampleGeometry.phase`, 0 but on some joins).

    Every way of making one (`make_manifest`, `from_json`, `loads`, the constructor) is
    checked here, because a wrong manifest does not fail later: it silently feeds the model
    the wrong samples (a unit in two splits, units past the store's end, a range read
    backwards). Values are stored as plain Python data, so `to_json()` is plain too.
    """

    num_samples: int
    unit_length: int
    layouts: Mapping[str, VariableLayout]
    splits: Mapping[str, list[list[int]]]
    rule: Mapping[str, Any] = field(default_factory=dict)
    steps: Mapping[str, list[list[int]]] | None = None
    dates: Mapping[str, Any] | None = None
    time: Mapping[str, Any] | None = None
    phase: int = 0

    def __post_init__(self) -> None:
        num_samples = positive_int(self.num_samples, "num_samples")
        unit_length = positive_int(self.unit_length, "unit_length")
        object.__setattr__(self, "num_samples", num_samples)
        object.__setattr__(self, "unit_length", unit_length)
        object.__setattr__(self, "phase", checked_phase(self.phase, unit_length))
        if not isinstance(self.layouts, Mapping):
            raise ValueError(
                f"manifest field 'layouts' must map variable names to layouts, got "
                f"{shown(self.layouts)}{FIX_HINT}"
            )
        finest = fine_grid(self.layouts.values())
        layouts = {
            name: checked_layout(name, layout, num_samples, unit_length, finest)
            for name, layout in self.layouts.items()
        }
        if not isinstance(self.splits, Mapping):
            raise ValueError(
                f"manifest field 'splits' must map split names to lists of [start, stop) unit "
                f"ranges, got {shown(self.splits)}{FIX_HINT}"
            )
        where = f"the store ({num_samples} samples in units of {unit_length})"
        splits: dict[str, list[list[int]]] = {}
        for name, ranges in self.splits.items():
            if not isinstance(name, str) or not name:
                raise ValueError(
                    f"manifest split name {shown(name)} is not a non-empty str{FIX_HINT}"
                )
            if name == ALL_SPLIT:
                raise ValueError(
                    f"manifest split name {ALL_SPLIT!r} is reserved: it always means every unit "
                    f"of the store; rename that split in the manifest"
                )
            splits[name] = checked_ranges(name, ranges, self.num_units, where)
        if self.steps is None:
            check_disjoint(splits)
        else:
            object.__setattr__(self, "steps", self._checked_steps(splits, where))
        for key in ("dates", "time"):
            value = getattr(self, key)
            if value is not None:
                if not isinstance(value, Mapping):
                    raise ValueError(
                        f"manifest field {key!r} must be an object, got {shown(value)}{FIX_HINT}"
                    )
                object.__setattr__(self, key, plain_data(value, repr(key)))
        if not isinstance(self.rule, Mapping):
            raise ValueError(
                f"manifest field 'rule' must be an object, got {shown(self.rule)}{FIX_HINT}"
            )
        object.__setattr__(self, "layouts", layouts)
        object.__setattr__(self, "splits", splits)
        object.__setattr__(self, "rule", plain_data(self.rule, "'rule'"))

    def _checked_steps(
        self, splits: Mapping[str, list[list[int]]], where: str
    ) -> dict[str, list[list[int]]]:
        """Each split's step ranges: inside the store, disjoint across splits, and covering
        exactly the units that split lists."""
        if not isinstance(self.steps, Mapping) or sorted(self.steps) != sorted(splits):
            raise ValueError(
                f"manifest field 'steps' must give [start, stop) step ranges for exactly the "
                f"splits {sorted(splits)}, got {shown(self.steps)}{FIX_HINT}"
            )
        steps = {
            name: checked_ranges(name, self.steps[name], self.num_samples, where, kind="step")
            for name in splits
        }
        check_disjoint(steps, kind="step")
        for name, ranges in steps.items():
            held = units_of(_ranges_to_units(ranges), self.unit_length, self.phase)
            touched = units_to_ranges(np.unique(held))
            if touched != units_to_ranges(_ranges_to_units(splits[name])):
                raise ValueError(
                    f"manifest split {name!r} lists units {splits[name]}, but its steps "
                    f"{ranges} lie in units {touched}: the units of a split cut by steps are "
                    f"those its steps touch{FIX_HINT}"
                )
        return steps

    @property
    def num_units(self) -> int:
        return unit_count(self.num_samples, self.unit_length, self.phase)

    def step_ranges(self, split: str) -> np.ndarray:
        """`split`'s [start, stop) ranges of steps, (R, 2): its own steps when the manifest
        was cut by dates, else its units' steps; `"all"` is every step.

        Args:
            split: a split name of this manifest, or "all".
        """
        units = self.units(split)  # names an unknown or empty split
        if split == ALL_SPLIT:
            return np.array([[0, self.num_samples]], dtype=np.int64)
        if self.steps is not None:
            return np.asarray(sorted(self.steps[split]), dtype=np.int64).reshape(-1, 2)
        ranges = np.asarray(units_to_ranges(units), dtype=np.int64).reshape(-1, 2)
        grid = (self.unit_length, self.phase, self.num_samples)
        starts, _ = unit_bounds(ranges[:, 0], *grid)
        _, stops = unit_bounds(ranges[:, 1] - 1, *grid)
        return np.stack([starts, stops], axis=1)

    def split_names(self) -> list[str]:
        return [*self.splits, ALL_SPLIT]

    def units(self, split: str) -> np.ndarray:
        """Sorted unit ids of `split`; `"all"` is every unit (no split may take that name).

        Args:
            split: a split name of this manifest, or "all".
        """
        if split == ALL_SPLIT:
            return np.arange(self.num_units, dtype=np.int64)
        if split not in self.splits:
            raise ValueError(f"unknown split {split!r}: this manifest has {self.split_names()}")
        units = np.sort(_ranges_to_units(self.splits[split]))
        if units.size == 0:
            raise ValueError(
                f"split {split!r} is empty: the store has {self.num_units} chunk-aligned units "
                f"along the sample axis; give this split a larger fraction or use smaller chunks"
            )
        return units

    def to_json(self) -> dict[str, Any]:
        """The manifest as plain JSON data (ints, strs, lists, dicts: never numpy scalars)."""
        return {
            "format": MANIFEST_FORMAT,
            "num_samples": self.num_samples,
            "unit_length": self.unit_length,
            "layouts": {name: layout.to_json() for name, layout in self.layouts.items()},
            "splits": {name: [list(r) for r in ranges] for name, ranges in self.splits.items()},
            "rule": plain_data(self.rule, "'rule'"),
            **{
                key: plain_data(value, repr(key))
                for key, value in (
                    ("steps", self.steps),
                    ("dates", self.dates),
                    ("time", self.time),
                )
                if value is not None
            },
            **({"phase": self.phase} if self.phase else {}),
        }

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SplitManifest:
        """Parse the JSON form (`to_json()`), refusing anything it could not have written.

        Args:
            data: the decoded JSON object: format, num_samples, unit_length, layouts,
                splits and (optionally) rule.
        """
        if not isinstance(data, Mapping):
            raise ValueError(
                f"a manifest must be a JSON object with the fields {list(FIELDS)}, got "
                f"{shown(data)}{FIX_HINT}"
            )
        if "format" not in data:
            raise ValueError(
                f"manifest has no 'format' field (expected {MANIFEST_FORMAT}): is it a split "
                f"manifest?{FIX_HINT}"
            )
        fmt = data["format"]
        if not is_int(fmt) or fmt != MANIFEST_FORMAT:
            raise ValueError(
                f"manifest format {fmt!r} is not supported (expected "
                f"{MANIFEST_FORMAT}); recreate it with make_manifest()"
            )
        unknown = [key for key in data if key not in FIELDS]
        if unknown:
            raise ValueError(
                f"manifest has unknown field(s) {unknown!r}: a manifest has only "
                f"{list(FIELDS)}{FIX_HINT}"
            )
        missing = [key for key in REQUIRED_FIELDS if key not in data]
        if missing:
            raise ValueError(f"manifest has no {', '.join(map(repr, missing))} field{FIX_HINT}")
        layouts = data["layouts"]
        if not isinstance(layouts, Mapping):
            raise ValueError(
                f"manifest field 'layouts' must map variable names to layouts, got "
                f"{shown(layouts)}{FIX_HINT}"
            )
        return cls(
            num_samples=data["num_samples"],
            unit_length=data["unit_length"],
            layouts={name: layout_from_json(name, v) for name, v in layouts.items()},
            splits=data["splits"],
            rule=data.get("rule", {}),
            steps=data.get("steps"),
            dates=data.get("dates"),
            time=data.get("time"),
            phase=data.get("phase", 0),
        )

    @classmethod
    def loads(cls, text: str, *, source: str | None = None) -> SplitManifest:
        """Parse a manifest's JSON text (what `dumps()` writes).

        Args:
            text: the JSON text.
            source: what the text came from, e.g. "manifest file '/data/splits.json'",
                named in every error (without it, errors say "manifest text").
        """
        try:
            data = json.loads(text, object_pairs_hook=no_duplicate_keys)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"{source or 'manifest text'} is not valid JSON: {err.msg} at line "
                f"{err.lineno}, column {err.colno}; fix it, or write it again with "
                f"SplitManifest.dumps()"
            ) from None
        except ValueError as err:
            raise ValueError(f"{source or 'manifest text'}: {err}{FIX_HINT}") from None
        if source is None:
            return cls.from_json(data)
        try:
            return cls.from_json(data)
        except ValueError as err:
            raise ValueError(f"{source}: {err}") from None

    def geometry_for(self, layouts: Mapping[str, VariableLayout]) -> SampleGeometry:
        """Check this manifest fits the store's current `layouts`; return the loader geometry.

        Variables recorded in the manifest must be unchanged; variables it does not record
        must still share its sample axis and chunk evenly into its units.

        Args:
            layouts: the selected variables' layouts as the store has them now.
        """
        problems = []
        finest = fine_grid([*layouts.values(), *self.layouts.values()])
        for name, layout in layouts.items():
            recorded = self.layouts.get(name)
            if recorded is not None and recorded != layout:
                problems.append(
                    f"{name!r} is now shape={layout.shape} chunks={layout.chunks} "
                    f"dtype={layout.dtype} but the manifest recorded shape={recorded.shape} "
                    f"chunks={recorded.chunks} dtype={recorded.dtype}"
                )
            elif layout.sample_length != self.num_samples:
                problems.append(
                    f"{name!r} has {layout.sample_length} samples but the manifest was made for "
                    f"{self.num_samples}"
                )
            elif self.unit_length % layout.sample_chunk and self.unit_length != finest:
                problems.append(
                    f"{name!r} has sample-axis chunk length {layout.sample_chunk}, which does "
                    f"not divide the manifest's unit length {self.unit_length}"
                )
        if problems:
            raise ValueError(
                "the manifest does not match this store (was the store changed, or is the "
                "manifest from another store?): "
                + "; ".join(problems)
                + ". Make a new manifest with make_manifest() for this store."
            )
        # The fine grid of the manifest's variables, which a subset of them (its shortest
        # chunk longer) still reads: pieces of any unit length read right (`read_plan`).
        return SampleGeometry.from_layouts(
            layouts, unit_length=self.unit_length, finest=finest, phase=self.phase
        )


def make_manifest(
    geometry: SampleGeometry,
    fractions: Mapping[str, float] = DEFAULT_FRACTIONS,
    *,
    shuffle: bool = False,
    seed: int = 0,
    allow_empty: bool = False,
) -> SplitManifest:
    """Cut the unit grid into named splits by `fractions` (in the order given).

    Contiguous by default: split k takes the k-th stretch of the time axis. With
    `shuffle=True` units are dealt out in a seeded random order instead (no leakage
    guard: only for data whose samples are independent). A split too small to get a unit
    is an error unless `allow_empty` (then asking for that split is the error).

    Args:
        geometry: the store's variables and unit grid.
        fractions: split name -> share of the units, each > 0, summing to 1.
        shuffle: deal units to splits in a seeded random order instead of in stretches.
        seed: the seed of that order (unused without `shuffle`).
        allow_empty: let a split too small for one unit be empty instead of refusing.
    """
    if not fractions:
        raise ValueError("fractions is empty: give at least one split, e.g. {'train': 1.0}")
    bad = {n: f for n, f in fractions.items() if not (f > 0)}
    if bad:
        raise ValueError(f"split fractions must be > 0, got {bad}")
    total = float(sum(fractions.values()))
    if not math.isclose(total, 1.0, abs_tol=1e-6):
        raise ValueError(f"split fractions must sum to 1, got {dict(fractions)} (sum {total:g})")
    if ALL_SPLIT in fractions:
        raise ValueError(f"{ALL_SPLIT!r} is reserved for the whole sample axis; rename that split")
    n = geometry.num_units
    bounds = np.rint(np.cumsum([0.0, *fractions.values()]) * n).astype(np.int64)
    bounds[-1] = n
    order = rng_for(seed, "manifest").permutation(n) if shuffle else np.arange(n, dtype=np.int64)
    splits: dict[str, list[list[int]]] = {}
    for (name, _), lo, hi in zip(fractions.items(), bounds[:-1], bounds[1:], strict=True):
        if hi <= lo and not allow_empty:
            raise ValueError(
                f"split {name!r} would be empty: {n} units of {geometry.unit_length} samples "
                f"cannot give it a fraction of {fractions[name]}; use fewer splits, a larger "
                f"fraction or smaller chunks"
            )
        splits[name] = units_to_ranges(order[lo:hi])
    return SplitManifest(
        num_samples=geometry.num_samples,
        unit_length=geometry.unit_length,
        layouts=dict(geometry.variables),
        splits=splits,
        phase=geometry.phase,
        rule={
            "fractions": dict(fractions),
            "shuffle": shuffle,
            "seed": seed,
            "anchors": ANCHOR_RULE,
        },
    )
