"""`insitubatch split`: a manifest cut by dates, and what each split holds, in words.

A user checks a split before training on it: which dates each split really holds (the
first and last step, not the dates typed), how many steps and units, and which units sit
on a boundary (read by both splits, each using only its own steps). `split_manifest`
makes the manifest exactly as `build_loader(splits=...)` would (with `unit_steps`, as
`make_manifest` takes a geometry's unit), and `split_text` lays it out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from zarr.abc.store import Store

from insitubatch_nodes.core.date_manifest import make_date_manifest
from insitubatch_nodes.core.date_ranges import RangeLike, range_from_text
from insitubatch_nodes.core.geometry import SampleGeometry
from insitubatch_nodes.core.manifest import SplitManifest
from insitubatch_nodes.core.unit_grid import grid_manifest
from insitubatch_nodes.io.joined_source import open_source


def split_manifest(
    source: str | Path | Store | Sequence[str | Path | Store],
    splits: Mapping[str, RangeLike],
    variables: Sequence[str] | None = None,
    *,
    unit_steps: int | None = None,
    storage_options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
    join: str = "exact",
) -> SplitManifest:
    """The manifest of `splits` (dates) on `source`'s time coordinate.

    Args:
        source: the Zarr group: a URL or path, or an open zarr `Store`; or a list of them,
            joined as `build_loader` joins them (the manifest is cut on the joined axis).
        splits: split name -> an inclusive range of dates (`make_date_manifest`).
        variables: the arrays the manifest is for (default: the loader's default).
        unit_steps: steps per unit (a multiple of every variable's time chunk); default
            the arrays' own unit, or the fine grid when that leaves a split no unit of its
            own (`core.unit_grid.grid_manifest`, as `build_loader(splits=)` cuts).
        storage_options: object-store client options (obstore's): for a join, one dict
            for every store or one per store.
        join: how a list of stores is aligned on time, as `build_loader` takes it.
    """
    opened = open_source(source, variables, storage_options=storage_options, join=join)
    axis = opened.time_axis()
    if unit_steps is None:  # the grid build_loader(splits=) cuts on
        return grid_manifest(opened.layouts, lambda grid: make_date_manifest(grid, axis, splits))
    geometry = SampleGeometry.from_layouts(opened.layouts, unit_length=unit_steps)
    return make_date_manifest(geometry, axis, splits)


def split_text(manifest: SplitManifest) -> str:
    """What `manifest` (cut by dates) holds: the time coordinate, then one row per split
    (dates asked, first and last date held, steps, units), then the boundary units.

    Args:
        manifest: a manifest from `make_date_manifest`.
    """
    if manifest.steps is None or manifest.time is None or manifest.dates is None:
        raise ValueError("this manifest was not cut by dates; make one with make_date_manifest()")
    time = manifest.time
    asked = manifest.rule.get("dates", {})
    calendar = f" ({time['calendar']} calendar)" if "calendar" in time else ""
    lines = [
        f"time coordinate {time['coordinate']!r}{calendar}: {time['first']} .. {time['last']}, "
        f"{time['steps']} steps; units of {manifest.unit_length} step(s)"
        + (f", the first full one from step {manifest.phase}" if manifest.phase else ""),
    ]
    header = ("split", "dates asked", "first step", "last step", "steps", "units")
    rows = []
    for name in manifest.splits:
        first, last = asked.get(name, ["?", "?"])
        steps = sum(b - a for a, b in manifest.steps[name])
        rows.append(
            (
                name,
                first if first == last else f"{first} .. {last}",
                manifest.dates[name][0],
                manifest.dates[name][1],
                str(steps),
                str(manifest.units(name).size),
            )
        )
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = [
            c.rjust(w) if i >= 4 else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    lines.append(_shared_text(manifest))
    return "\n".join(lines)


def _shared_text(manifest: SplitManifest) -> str:
    owners: dict[int, list[str]] = {}
    for name in manifest.splits:
        for unit in manifest.units(name).tolist():
            owners.setdefault(unit, []).append(name)
    shared = {u: names for u, names in sorted(owners.items()) if len(names) > 1}
    if not shared:
        return "no unit is shared: every boundary falls between units"
    parts = [f"unit {u} ({' | '.join(names)})" for u, names in shared.items()]
    return (
        "units on a boundary, read by both splits, each using only its own steps: "
        + ", ".join(parts[:8])
        + (f" and {len(parts) - 8} more" if len(parts) > 8 else "")
    )


def parsed_splits(ranges: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Command-line ranges ("1979:2015", "2016") as (first, last) pairs, in order.

    Args:
        ranges: split name -> the range as typed.
    """
    return {name: range_from_text(text, f"--{name}") for name, text in ranges.items()}
