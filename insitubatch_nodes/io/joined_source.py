"""Several stores as one source: variables looked up by name, joined on time by value.

ERA5 from the CDS comes as pressure-level and surface downloads, and static fields often
live in a store of their own. A join reads each store in place, with its own chunking,
codecs, credentials and way in: what it decides is which store holds each variable
(`io.joined_selection`: each store along its own time coordinate), which
stored steps make the joined time axis (`core.time_join`: each store's `origin`), and that
the grids are one. The result is a `ZarrSource` whose layouts carry their store's origin,
so the core's units, splits and read plans cover every store (`core.read_plan` sends each
variable's reads to its own steps), and whose `parts` route each variable's chunks to its
own store (`ReadContext.joined`).

What a loader over a join yields is what `xr.merge([xr.open_zarr(u) for u in urls],
join=...)` shows at each joined position.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store

from insitubatch_nodes.core.area import Area
from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY
from insitubatch_nodes.core.channels import DEFAULT_SPATIAL_DIMS
from insitubatch_nodes.core.date_ranges import RangeLike, TimeAxis
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.time_join import check_join_policy, join_times
from insitubatch_nodes.io.joined_picks import (
    joined_area_picks,
    joined_level_picks,
    merged_levels,
)
from insitubatch_nodes.io.joined_selection import select_joined
from insitubatch_nodes.io.metadata.array_records import describe_arrays
from insitubatch_nodes.io.metadata.grid_coordinates import GridCoordinates, read_grid_coordinates
from insitubatch_nodes.io.metadata.levels import LevelsLike
from insitubatch_nodes.io.metadata.time_axis import read_time_axis
from insitubatch_nodes.io.metadata.zarr_layout import arrays_of, open_root_group
from insitubatch_nodes.io.source_manifest import ManifestLike, fit_manifest
from insitubatch_nodes.io.store_part import StorePart
from insitubatch_nodes.io.stores.icechunk_store import snapshot_id_of
from insitubatch_nodes.io.stores.open_store import describe, open_store
from insitubatch_nodes.io.stores.redact import secrets_in
from insitubatch_nodes.io.zarr_source import ZarrSource

log = logging.getLogger(__name__)

SourceLike = str | Path | Store
GRID_TOLERANCE = 1e-6  # degrees: grids closer than this are one grid


def source_list(source: Any) -> list[Any] | None:
    """The stores of a join when `source` is a list or tuple of them, else None (one store).

    Args:
        source: what the user passed as `source=`.
    """
    if not isinstance(source, list | tuple):
        return None
    if not source:
        raise ValueError("source is an empty list; give a store, or a list of stores to join")
    return list(source)


def options_per_store(storage_options: Any, count: int) -> list[dict[str, Any] | None]:
    """`storage_options` as one dict (or None) per store: a list aligned with the stores,
    or one dict (or None) for every store.

    Args:
        storage_options: what the user passed.
        count: how many stores are joined.
    """
    if storage_options is None or isinstance(storage_options, Mapping):
        return [None if storage_options is None else dict(storage_options)] * count
    if isinstance(storage_options, list | tuple):
        if len(storage_options) != count or not all(
            o is None or isinstance(o, Mapping) for o in storage_options
        ):
            raise ValueError(
                f"storage_options is a list of length {len(storage_options)}, and source "
                f"joins {count} stores: give one dict (or None) per store, in the order of "
                f"source, or one dict for every store"
            )
        return [None if o is None else dict(o) for o in storage_options]
    raise TypeError(
        f"storage_options must be a dict, a list of dicts (one per store of a join), or None; "
        f"got {type(storage_options).__name__}"
    )


def source_where(source: Any, storage_options: Any = None) -> str:
    """How messages name `source`, credentials redacted: one store as `describe` names it,
    several as "the join of A and B" (as a joined `ZarrSource.where` reads).

    Args:
        source: a URL, path or zarr `Store`, or a list of them.
        storage_options: as `open_source` takes them (their secrets are redacted).
    """
    sources = source_list(source)
    if sources is None:
        options = storage_options if isinstance(storage_options, Mapping) else None
        return describe(source, secrets_in(options, source if isinstance(source, str) else None))
    wheres = [
        describe(one, secrets_in(options, one if isinstance(one, str) else None))
        for one, options in zip(
            sources, options_per_store(storage_options, len(sources)), strict=True
        )
    ]
    return wheres[0] if len(wheres) == 1 else "the join of " + " and ".join(wheres)


def open_source(
    source: Any,
    variables: Sequence[str] | None = None,
    *,
    manifest: ManifestLike | None = None,
    storage_options: Any = None,
    splits: Mapping[str, RangeLike] | None = None,
    levels: LevelsLike | None = None,
    spatial_dims: int = DEFAULT_SPATIAL_DIMS,
    decode_cf: bool = True,
    use_zarr_fill_value_as_mask: bool | None = None,
    area: Area | None = None,
    join: str = "exact",
) -> ZarrSource:
    """One store (`ZarrSource.open`) or a join of several (`open_joined`); a list of one
    store is that store.

    Args:
        source: a URL, path or zarr `Store`, or a list of them to join.
        variables: the arrays to load, looked up by name in every store (default: each
            store's own default choice).
        manifest: the split manifest (`io.source_manifest.load_manifest` takes its forms).
        storage_options: object-store client options: one dict for every store, or a
            list with one dict (or None) per store.
        splits: split name -> an inclusive range of dates, cut on the (joined) time axis.
        levels: level values to keep (`ZarrSource.open`).
        spatial_dims: the trailing grid axes.
        decode_cf: decode values as `xr.open_zarr` does.
        use_zarr_fill_value_as_mask: as `xr.open_zarr` takes it; None picks by format.
        area: a box of latitude and longitude every variable is cropped to, or None.
        join: how stores are aligned on time: `"exact"` or `"inner"` (`core.time_join`).
    """
    join = check_join_policy(join)
    sources = source_list(source)
    count = 1 if sources is None else len(sources)
    options = options_per_store(storage_options, count)
    settings: dict[str, Any] = dict(
        manifest=manifest,
        splits=splits,
        levels=levels,
        spatial_dims=spatial_dims,
        decode_cf=decode_cf,
        use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
        area=area,
    )
    if sources is None or count == 1:
        one = source if sources is None else sources[0]
        return ZarrSource.open(one, variables, storage_options=options[0], **settings)
    return open_joined(sources, variables, storage_options=options, join=join, **settings)


@dataclass(frozen=True)
class _Store:
    """A store of a join, opened: its arrays, and what it gives the loader."""

    store: Store = field(repr=False)
    where: str
    secrets: frozenset[str] = field(repr=False)
    arrays: Mapping[str, zarr.Array] = field(repr=False)

    @classmethod
    def open(cls, source: SourceLike, options: dict[str, Any] | None) -> _Store:
        secrets = secrets_in(options, source if isinstance(source, str) else None)
        where = describe(source, secrets)
        store = open_store(source, options)
        arrays = arrays_of(open_root_group(store, where, secrets), where, secrets)
        return cls(store, where, secrets, arrays)


def open_joined(
    sources: Sequence[SourceLike],
    variables: Sequence[str] | None,
    *,
    storage_options: Sequence[dict[str, Any] | None],
    join: str,
    manifest: ManifestLike | None,
    splits: Mapping[str, RangeLike] | None,
    levels: LevelsLike | None,
    spatial_dims: int,
    decode_cf: bool,
    use_zarr_fill_value_as_mask: bool | None,
    area: Area | None,
) -> ZarrSource:
    """Several stores as one `ZarrSource` (see the module), or the first refusal: a name
    in two stores, dates that differ under `join`, grids that differ.

    Args:
        sources: the stores, in order (a URL, path or zarr `Store` each).
        variables: the arrays to load, by name, or None for each store's default choice.
        storage_options: per store, its object-store client options or None.
        join: `"exact"` or `"inner"`.
        manifest: the split manifest, or None.
        splits: split name -> an inclusive range of dates, or None.
        levels: level values to keep (a list for every variable with a level axis, or
            variable -> values), or None.
        spatial_dims: the trailing grid axes.
        decode_cf: decode values as `xr.open_zarr` does.
        use_zarr_fill_value_as_mask: as `xr.open_zarr` takes it; None picks by format.
        area: a box of latitude and longitude, or None.
    """
    stores = [
        _Store.open(source, options)
        for source, options in zip(sources, storage_options, strict=True)
    ]
    selection = select_joined(stores, variables, _joined_where(stores), spatial_dims)
    fields, statics, owner = selection.fields, selection.statics, selection.owner
    names = list(owner)  # in the order asked
    if SAMPLE_INDEX_KEY in owner:
        raise ValueError(
            f"a variable is named {SAMPLE_INDEX_KEY!r}, which batches use for the sample "
            f"indices; select the other variables explicitly"
        )
    used = sorted({owner[n] for n in names})
    held = {i: [n for n in names if owner[n] == i] for i in used}
    axes = [_time_axis(stores[i], [n for n in held[i] if n in fields], fields) for i in used]
    joined = join_times(axes, [stores[i].where for i in used], join)
    for i, lost, axis in zip(used, joined.lost, axes, strict=True):
        if axis is not None:
            log.info(
                "join=%r: %s keeps %d of its %d steps (%d left out)",
                join,
                stores[i].where,
                axis.dates.size - lost,
                axis.dates.size,
                lost,
            )
    _check_grids([stores[i] for i in used], [held[i] for i in used], spatial_dims)
    length = joined.axis.dates.size
    origin_of = dict(zip(used, joined.origins, strict=True))
    runs_of = dict(zip(used, joined.runs, strict=True))
    layouts: dict[str, VariableLayout] = {}
    for name, layout in fields.items():
        start = origin_of[owner[name]]
        assert start is not None
        layouts[name] = replace(layout, origin=start, length=length, runs=runs_of[owner[name]])
    where = _joined_where([stores[i] for i in used])
    split_manifest, geometry = fit_manifest(
        layouts, manifest, splits, lambda _: joined.axis, "these stores"
    )
    if levels is None:  # stores of other levels align as xr.merge aligns them
        levels = merged_levels(stores, owner, layouts, join, spatial_dims)
    layouts = joined_level_picks(stores, owner, layouts, levels, spatial_dims)
    layouts, static_crops, area_axes, boxed = joined_area_picks(
        stores, owner, layouts, statics, area
    )
    geometry = replace(geometry, variables=dict(layouts))
    codecs: dict[str, str] = {}
    fills: dict[str, str] = {}
    decodings: dict[str, Any] = {}
    warnings: list[str] = []
    for i in used:
        kept = [n for n in [*layouts, *statics] if owner[n] == i]
        c, f, d, w = describe_arrays(stores[i].arrays, kept, decode_cf, use_zarr_fill_value_as_mask)
        codecs |= c
        fills |= f
        decodings |= d
        warnings += w
    parts = tuple(
        StorePart(
            stores[i].store,
            stores[i].where,
            tuple(n for n in layouts if owner[n] == i),
            tuple(n for n in statics if owner[n] == i),
            origin_of[i],
            None if axis is None else int(axis.dates.size),
            snapshot_id_of(stores[i].store),
            tuple(stores[i].secrets),
            runs_of[i],
        )
        for i, axis in zip(used, axes, strict=True)
    )
    first = stores[used[0]]
    return ZarrSource(
        first.store,
        where,
        layouts,
        geometry,
        split_manifest,
        codecs,
        fills,
        None,
        decodings=decodings,
        decoding_warnings=tuple(warnings),
        statics=statics,
        statics_left_out=selection.left_out,
        area=boxed,
        static_crops=static_crops,
        area_axes=area_axes,
        secrets=tuple(sorted(set().union(*(s.secrets for s in stores)))),
        parts=parts,
        join=join,
        joined_time=joined.axis,
    )


def _joined_where(stores: Sequence[_Store]) -> str:
    return "the join of " + " and ".join(s.where for s in stores)


def _time_axis(
    store: _Store, names: list[str], fields: Mapping[str, VariableLayout]
) -> TimeAxis | None:
    """The decoded time axis of the store's selected time-varying variables, or None for
    a store that gives static fields only."""
    if not names:
        return None
    length = SampleGeometry.from_layouts({n: fields[n] for n in names}).num_samples
    return read_time_axis(store.arrays, names, length, store.where, store.secrets)


def _check_grids(
    stores: Sequence[_Store],
    held: Sequence[list[str]],
    spatial_dims: int,
) -> None:
    """Refuse stores whose grids differ: in shape, or in latitude and longitude by more
    than `GRID_TOLERANCE` degrees at some grid point (the first one is named). Stores
    without grid coordinates are compared by shape alone, as `xr.merge` aligns them."""
    found: list[tuple[str, tuple[int, ...], GridCoordinates | None]] = []
    for store, names in zip(stores, held, strict=True):
        shape = tuple(store.arrays[names[0]].shape[-spatial_dims:]) if spatial_dims else ()
        try:
            coordinates = read_grid_coordinates(
                store.arrays, names, spatial_dims, store.where, store.secrets
            )
        except ValueError:  # no latitude or longitude: the shape is all there is to compare
            coordinates = None
        found.append((store.where, shape, coordinates))
    where, shape, coordinates = found[0]
    for other, other_shape, other_coordinates in found[1:]:
        if other_shape != shape:
            raise ValueError(
                f"the grid of {where} is {shape} and the grid of {other} is {other_shape}: "
                f"joined stores must share one grid; regrid one, or join stores on one grid"
            )
        if coordinates is None or other_coordinates is None:
            continue
        for kind, mine, theirs in (
            ("latitude", coordinates.latitude, other_coordinates.latitude),
            ("longitude", coordinates.longitude, other_coordinates.longitude),
        ):
            a, b = np.broadcast_arrays(mine, theirs)
            far = np.flatnonzero(~(np.abs(a - b) <= GRID_TOLERANCE))
            if far.size:
                at = np.unravel_index(int(far[0]), a.shape)
                point = tuple(int(i) for i in at)
                raise ValueError(
                    f"the {kind} of {where} and of {other} differ at grid point {point}: "
                    f"{float(a[at])!r} and {float(b[at])!r} (joined grids must agree within "
                    f"{GRID_TOLERANCE} degrees, in the same order); regrid one, or join stores "
                    f"on one grid"
                )
