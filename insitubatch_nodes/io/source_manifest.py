"""The split manifest a source reads by: one a user gives, in any of the forms they hold
it in, checked against the store; or one cut for the store, by dates or by the default
fractions.

Every way ends in `SplitManifest`'s checks and in the store's own arrays, so a
hand-edited, foreign or stale manifest is refused before it can mis-split the store. One
store (`io.zarr_source`) and a join of several (`io.joined_source`) fit theirs the same
way, the join on its joined time axis.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from insitubatch_nodes.core.date_manifest import make_date_manifest, time_differences
from insitubatch_nodes.core.date_ranges import RangeLike, TimeAxis
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import SplitManifest, make_manifest
from insitubatch_nodes.core.unit_grid import grid_manifest

ManifestLike = SplitManifest | Mapping[str, Any] | str | Path


def load_manifest(manifest: ManifestLike) -> SplitManifest:
    """A split manifest from any of the forms a user has one in, checked.

    Every form ends in `SplitManifest`'s checks, so a hand-edited or foreign manifest is
    refused before it can mis-split the store. A str is JSON text when its first non-blank
    character is "{" (no file name starts that way in practice) and a path otherwise.

    Args:
        manifest: a `SplitManifest`; its JSON form as a dict (`SplitManifest.to_json()`);
            its JSON text (`SplitManifest.dumps()`); or the path (str or `pathlib.Path`)
            of a file holding that text.
    """
    if isinstance(manifest, SplitManifest):
        return manifest
    if isinstance(manifest, Mapping):
        return SplitManifest.from_json(manifest)
    if isinstance(manifest, str) and manifest.lstrip().startswith("{"):
        return SplitManifest.loads(manifest)
    if isinstance(manifest, str | Path):
        if not str(manifest).strip():
            raise ValueError(
                "manifest is an empty string; give a SplitManifest, its dict, its JSON text or "
                "the path of its JSON file"
            )
        path = Path(manifest)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise FileNotFoundError(
                f"manifest file {str(path)!r} does not exist; check the path (a manifest file "
                f"is what SplitManifest.dumps() writes)"
            ) from None
        except IsADirectoryError:
            raise ValueError(
                f"manifest path {str(path)!r} is a directory; give the path of the manifest's "
                f"JSON file"
            ) from None
        except UnicodeDecodeError as err:
            raise ValueError(
                f"manifest file {str(path)!r} is not UTF-8 text ({err.reason} at byte "
                f"{err.start}): is it a manifest? A manifest file is what SplitManifest.dumps() "
                f"writes"
            ) from None
        return SplitManifest.loads(text, source=f"manifest file {str(path)!r}")
    raise TypeError(
        f"manifest must be a SplitManifest, its JSON dict, its JSON text, or the path (str or "
        f"pathlib.Path) of its JSON file; got {type(manifest).__name__}"
    )


def fit_manifest(
    layouts: Mapping[str, VariableLayout],
    manifest: ManifestLike | None,
    splits: Mapping[str, RangeLike] | None,
    time_axis: Callable[[int], TimeAxis],
    what: str,
) -> tuple[SplitManifest, SampleGeometry]:
    """The split manifest of `layouts` (cut by `splits`' dates, the default fractions, or
    `manifest` checked against them) and the loader's geometry on it. Either is cut on
    the fine grid when the chunks' least common multiple leaves a split no unit of its
    own (`core.unit_grid.grid_manifest`).

    Args:
        layouts: the selected time-varying variables, by name.
        manifest: a manifest to check (`load_manifest` takes its forms), or None.
        splits: split name -> an inclusive range of dates, or None.
        time_axis: reads the decoded time coordinate of the given length, when dates are
            needed (a join's is the joined axis).
        what: the data as messages name it ("this store").
    """
    if splits is not None:
        length = SampleGeometry.from_layouts(layouts).num_samples
        axis = time_axis(length)
        split_manifest = grid_manifest(layouts, lambda grid: make_date_manifest(grid, axis, splits))
        return split_manifest, split_manifest.geometry_for(layouts)
    if manifest is None:
        split_manifest = grid_manifest(layouts, lambda grid: make_manifest(grid, allow_empty=True))
        return split_manifest, split_manifest.geometry_for(layouts)
    split_manifest = load_manifest(manifest)
    geometry = split_manifest.geometry_for(layouts)
    if split_manifest.time is not None:
        changed = time_differences(split_manifest.time, time_axis(geometry.num_samples))
        if changed is not None:
            raise ValueError(
                f"the manifest does not match {what}: {changed}. Cut a new manifest for "
                f"{what} (insitubatch split, or splits=)"
            )
    return split_manifest, geometry
