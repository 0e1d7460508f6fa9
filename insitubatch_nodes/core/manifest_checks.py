"""The checks every split manifest passes, however it was made (`core.manifest`).

A wrong manifest does not fail later: it silently feeds the model the wrong samples (a
unit in two splits, units past the store's end, a range read backwards). So each field is
checked for its type and range, and each refusal names the field, the bad value and what
to do: a manifest fails either because it was edited by hand (fix it) or because another
tool or version wrote it (make it again).
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from insitubatch_nodes.core.geometry import VariableLayout

# What to do about a manifest that fails a check: it was either edited by hand (fix it) or
# is from an older or foreign tool (make it again).
FIX_HINT = "; fix the manifest or recreate it with make_manifest()"
FIELDS = (
    "format",
    "num_samples",
    "unit_length",
    "layouts",
    "splits",
    "rule",
    "steps",
    "dates",
    "time",
    "phase",
)
REQUIRED_FIELDS = ("format", "num_samples", "unit_length", "layouts", "splits")


def is_int(value: object) -> bool:
    """A whole number that is not a bool (True would otherwise pass as unit 1).

    Args:
        value: anything read from a manifest.
    """
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def shown(value: object) -> str:
    """A bad value as the user wrote it, with its type (so '3' and 3.0 are told from 3).

    Args:
        value: the value to show in a message.
    """
    return f"{value!r} ({type(value).__name__})"


def _is_sequence(value: object) -> bool:
    """A list-like of items (a list, a tuple, an array), not a string or a mapping."""
    if isinstance(value, np.ndarray):
        return value.ndim >= 1
    return isinstance(value, Sequence) and not isinstance(value, str | bytes)


def positive_int(value: object, name: str) -> int:
    """`value` as a Python int, refused unless it is a whole number >= 1.

    Args:
        value: the field's value.
        name: the field's name, for the message.
    """
    if not is_int(value) or int(value) < 1:
        raise ValueError(
            f"manifest field {name!r} must be a positive int, got {shown(value)}{FIX_HINT}"
        )
    return int(value)


def plain_data(value: object, where: str) -> Any:
    """`value` as plain JSON data (numpy scalars and tuples converted), so that every
    manifest written out reads back equal, whatever built it.

    Args:
        value: a field's value, possibly nested.
        where: the field's path, for the message.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if is_int(value):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, np.ndarray):
        return plain_data(value.tolist(), where)
    if isinstance(value, Mapping):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise ValueError(
                f"manifest field {where} has a key that is not a str: {shown(bad[0])}{FIX_HINT}"
            )
        return {k: plain_data(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain_data(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise ValueError(
        f"manifest field {where} holds {shown(value)}, which is not plain JSON data (str, int, "
        f"float, bool, None, lists and dicts){FIX_HINT}"
    )


def fine_grid(layouts: Iterable[object]) -> int:
    """The shortest sample-axis chunk length among `layouts` (entries not yet checked
    are skipped: `checked_layout` names them), or 0 for none: the one unit length a
    manifest may have that is not a multiple of every chunk length (`core.unit_grid`).

    Args:
        layouts: recorded layouts, checked or not.
    """
    lengths = [
        int(layout.chunks[0])
        for layout in layouts
        if isinstance(layout, VariableLayout) and is_int(layout.chunks[0])
    ]
    return min(lengths, default=0)


def checked_phase(phase: object, unit_length: int) -> int:
    """`phase` as an int, after checking it is a step inside the first unit's length.

    Args:
        phase: the manifest's recorded phase (`SampleGeometry.phase`).
        unit_length: the manifest's unit length.
    """
    if not is_int(phase) or not 0 <= int(phase) < unit_length:
        raise ValueError(
            f"manifest field 'phase' must be an int in 0..{unit_length - 1} (the step where "
            f"its first full unit starts), got {shown(phase)}{FIX_HINT}"
        )
    return int(phase)


def checked_layout(
    name: object, layout: object, num_samples: int, unit_length: int, finest_chunk: int = 0
) -> VariableLayout:
    """`layout` with plain ints, after checking it can be a variable cut into these units.

    Args:
        name: the variable's name.
        layout: its recorded layout.
        num_samples: the manifest's sample count.
        unit_length: the manifest's unit length.
        finest_chunk: the shortest sample-axis chunk length of the manifest's variables: a
            unit length equal to it (the fine grid, `core.unit_grid`) may straddle the
            other variables' chunks; 0 for none.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"manifest layout name {shown(name)} is not a non-empty str{FIX_HINT}")
    if not isinstance(layout, VariableLayout):
        raise ValueError(
            f"manifest layout of {name!r} must be a VariableLayout, got {shown(layout)}{FIX_HINT}"
        )
    for what, values, low in (("shape", layout.shape, 0), ("chunks", layout.chunks, 1)):
        if not all(is_int(v) and int(v) >= low for v in values):
            raise ValueError(
                f"manifest layout of {name!r} has {what}={_layout_repr(values)}: every entry must "
                f"be an int >= {low}{FIX_HINT}"
            )
    if not isinstance(layout.dtype, str | np.dtype):
        raise ValueError(
            f"manifest layout of {name!r} has dtype={shown(layout.dtype)}, not a dtype "
            f"name{FIX_HINT}"
        )
    plain = VariableLayout(
        tuple(int(s) for s in layout.shape),
        tuple(int(c) for c in layout.chunks),
        str(layout.dtype),
        origin=layout.origin,
        length=layout.length,
        runs=layout.runs,
    )
    if plain.sample_length != num_samples:
        raise ValueError(
            f"manifest layout of {name!r} has {plain.sample_length} samples along axis 0, but the "
            f"manifest's num_samples is {num_samples}{FIX_HINT}"
        )
    if unit_length % plain.sample_chunk and unit_length != finest_chunk:
        raise ValueError(
            f"manifest layout of {name!r} has sample-axis chunk length {plain.sample_chunk}, "
            f"which does not divide the manifest's unit_length {unit_length}: its chunks would "
            f"straddle units{FIX_HINT}"
        )
    return plain


def _layout_repr(values: Sequence[object]) -> str:
    return "(" + ", ".join(repr(v) for v in values) + ")"


def checked_ranges(
    name: str, ranges: object, num_units: int, where: str, kind: str = "unit"
) -> list[list[int]]:
    """The [start, stop) ranges of split `name` as plain ints, each inside the unit grid
    (or the steps) and none overlapping another of the same split.

    Args:
        name: the split's name.
        ranges: its recorded ranges.
        num_units: the store's unit count (with `kind="step"`, its step count).
        where: the store's size in words, for the message.
        kind: what the ranges count: "unit" (field 'splits') or "step" (field 'steps').
    """
    field = "split" if kind == "unit" else "'steps' of split"
    if not _is_sequence(ranges):
        raise ValueError(
            f"manifest {field} {name!r} must be a list of [start, stop) {kind} ranges, got "
            f"{shown(ranges)}{FIX_HINT}"
        )
    checked: list[list[int]] = []
    for i, pair in enumerate(ranges):  # type: ignore[arg-type]
        if not _is_sequence(pair) or len(pair) != 2:
            raise ValueError(
                f"manifest {field} {name!r} range {i} must be a [start, stop) pair of {kind} ids, "
                f"got {shown(pair)}{FIX_HINT}"
            )
        for bound in pair:
            if not is_int(bound):
                raise ValueError(
                    f"manifest {field} {name!r} range {i} is {list(pair)!r}: {kind} ids must be "
                    f"ints, got {shown(bound)}{FIX_HINT}"
                )
        start, stop = int(pair[0]), int(pair[1])
        if start < 0:
            raise ValueError(
                f"manifest {field} {name!r} range [{start}, {stop}) starts at a negative {kind}: "
                f"{kind} ids count from 0{FIX_HINT}"
            )
        if stop <= start:
            raise ValueError(
                f"manifest {field} {name!r} range [{start}, {stop}) is empty or reversed: a "
                f"range is [start, stop) with start < stop{FIX_HINT}"
            )
        if stop > num_units:
            raise ValueError(
                f"manifest {field} {name!r} range [{start}, {stop}) ends past the last {kind}: "
                f"{where} has {num_units} {kind}s, so stop must be <= {num_units}{FIX_HINT}"
            )
        checked.append([start, stop])
    by_start = sorted(checked)
    for (a, b), (c, d) in itertools.pairwise(by_start):
        if c < b:
            raise ValueError(
                f"manifest {field} {name!r} ranges [{a}, {b}) and [{c}, {d}) overlap: {kind}s "
                f"[{c}, {min(b, d)}) are listed twice{FIX_HINT}"
            )
    return checked


def check_disjoint(splits: Mapping[str, list[list[int]]], kind: str = "unit") -> None:
    """Refuse a unit (or a step) in two splits: the model would be scored on samples it
    trained on.

    Args:
        splits: each split's checked ranges.
        kind: what the ranges count: "unit" or "step".
    """
    spans = sorted((a, b, name) for name, ranges in splits.items() for a, b in ranges)
    reach: tuple[int, int, str] | None = None  # the span seen so far that ends last
    for span in spans:
        start, stop, name = span
        if reach is not None and start < reach[1]:
            # Each split's own ranges are disjoint (checked before), so `reach` is another
            # split's, and `start` is the lowest unit that any two splits share.
            first, last, other = reach
            raise ValueError(
                f"manifest splits {other!r} and {name!r} overlap: {kind}s "
                f"[{start}, {min(stop, last)}) are in both ({other!r} has [{first}, {last}), "
                f"{name!r} has [{start}, {stop})); a {kind} must belong to one split only, or "
                f"the model is evaluated on samples it trained on{FIX_HINT}"
            )
        if reach is None or stop > reach[1]:
            reach = span


def layout_from_json(name: str, data: object) -> VariableLayout:
    """A variable's layout from its JSON form, refused with the field at fault.

    Args:
        name: the variable's name.
        data: its JSON form (shape, chunks, dtype).
    """
    if not isinstance(data, Mapping):
        raise ValueError(
            f"manifest field 'layouts' entry {name!r} must be an object with shape, chunks and "
            f"dtype, got {shown(data)}{FIX_HINT}"
        )
    missing = [key for key in ("shape", "chunks", "dtype") if key not in data]
    if missing:
        raise ValueError(
            f"manifest field 'layouts' entry {name!r} has no {', '.join(missing)}{FIX_HINT}"
        )
    for key in ("shape", "chunks"):
        values = data[key]
        if not _is_sequence(values) or not all(is_int(v) for v in values):
            raise ValueError(
                f"manifest field 'layouts' entry {name!r} has {key}={shown(values)}: it must be "
                f"a list of ints{FIX_HINT}"
            )
    if not isinstance(data["dtype"], str):
        raise ValueError(
            f"manifest field 'layouts' entry {name!r} has dtype={shown(data['dtype'])}: it "
            f"must be a dtype name such as 'float32'{FIX_HINT}"
        )
    try:
        return VariableLayout.from_json(
            {**data, "shape": list(data["shape"]), "chunks": list(data["chunks"])}
        )
    except (ValueError, TypeError, KeyError, AssertionError) as err:
        raise ValueError(
            f"manifest field 'layouts' entry {name!r} is not valid: {err}{FIX_HINT}"
        ) from None


def no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON object hook: a key given twice would silently keep only its last value.

    Args:
        pairs: an object's (key, value) pairs in order.
    """
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(
                f"the key {key!r} appears twice in one object (JSON would keep only the last)"
            )
        seen[key] = value
    return seen
