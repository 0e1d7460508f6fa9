"""ZarrSource: an opened store, its selected variables, and the split manifest that fits it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from zarr.abc.store import Store

from insitubatch_nodes.core.area import Area, AreaSelection
from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY
from insitubatch_nodes.core.cf_decoding import YIELDS_KEY, CFDecoding
from insitubatch_nodes.core.channels import DEFAULT_SPATIAL_DIMS
from insitubatch_nodes.core.date_ranges import RangeLike, TimeAxis
from insitubatch_nodes.core.decoded_values import decode_values
from insitubatch_nodes.core.fingerprint import AREA_KEY, JOIN_KEY, join_record, source_fingerprint
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.manifest import SplitManifest
from insitubatch_nodes.io.metadata.array_records import describe_arrays
from insitubatch_nodes.io.metadata.grid_coordinates import (
    GridCoordinates,
    area_selection,
    read_grid_coordinates,
)
from insitubatch_nodes.io.metadata.levels import LevelsLike, level_picks
from insitubatch_nodes.io.metadata.time_axis import read_time_axis
from insitubatch_nodes.io.metadata.zarr_layout import arrays_of, open_root_group, select_variables
from insitubatch_nodes.io.reads.block_reader import ReadContext
from insitubatch_nodes.io.reads.retry import RetryPolicy
from insitubatch_nodes.io.reads.static_reads import read_whole_arrays
from insitubatch_nodes.io.source_manifest import ManifestLike, fit_manifest
from insitubatch_nodes.io.store_part import StorePart
from insitubatch_nodes.io.stores.icechunk_store import snapshot_id_of
from insitubatch_nodes.io.stores.open_store import describe, open_store
from insitubatch_nodes.io.stores.redact import secrets_in


@dataclass(frozen=True)
class ZarrSource:
    """An opened store (or a join of several), what a loader reads of it, and the split
    manifest that fits it: made by `ZarrSource.open` or `open_source`, read once when a
    loader is built, so that every later decision (the plan, a state's fingerprint, the
    reads) starts from the same description.

    Args:
        store: the read-only zarr store (`where` says which, without its credentials).
        where: the store as messages name it, credentials redacted.
        layouts: the selected time-varying variables' layouts, by name.
        geometry: the loader's samples and units over those layouts.
        manifest: the split manifest, checked against the store.
        codecs: each variable's codecs, by name.
        fill_values: each variable's fill value, as text.
        snapshot_id: the Icechunk snapshot the store reads, or None.
        decodings: each variable's way from stored values to xarray's
            (`io.metadata.cf_attributes`).
        decoding_warnings: what the decoding may surprise a user with (a v2 fill_value of
            0 masking zeros).
        statics: the static fields (no time dimension: `core.static_fields`), read whole
            by `read_statics`.
        statics_left_out: static fields the default choice of variables left out (name
            them to read them).
        area: the grid points `area=` keeps, in the batch's order, or None.
        static_crops: with an area, each static field's latitude and longitude axes,
            which `read_statics` crops.
        area_axes: with an area, each variable's latitude and longitude axes, which
            `grid_coordinates` crops the forcings' coordinates on.
        secrets: values known to be secret (URL userinfo, signatures, options' keys): kept
            out of the errors of later reads (the time coordinate), never in a repr or a
            state.
        parts: a join's stores (`io.joined_source`), in the order given; empty for one
            store.
        join: the policy that aligned a join's dates, or None.
        joined_time: a join's time axis, or None.
    """

    store: Store = field(repr=False)
    where: str
    layouts: Mapping[str, VariableLayout]
    geometry: SampleGeometry
    manifest: SplitManifest
    codecs: Mapping[str, str] = field(default_factory=dict)
    fill_values: Mapping[str, str] = field(default_factory=dict)
    snapshot_id: str | None = None
    decodings: Mapping[str, CFDecoding] = field(default_factory=dict)
    decoding_warnings: tuple[str, ...] = ()
    statics: Mapping[str, VariableLayout] = field(default_factory=dict)
    statics_left_out: tuple[str, ...] = ()
    area: AreaSelection | None = None
    static_crops: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    area_axes: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    secrets: tuple[str, ...] = field(default=(), repr=False)
    parts: tuple[StorePart, ...] = ()
    join: str | None = None
    joined_time: TimeAxis | None = None

    @classmethod
    def open(
        cls,
        source: str | Path | Store,
        variables: Sequence[str] | None = None,
        *,
        manifest: ManifestLike | None = None,
        storage_options: dict[str, Any] | None = None,
        splits: Mapping[str, RangeLike] | None = None,
        levels: LevelsLike | None = None,
        spatial_dims: int = DEFAULT_SPATIAL_DIMS,
        decode_cf: bool = True,
        use_zarr_fill_value_as_mask: bool | None = None,
        area: Area | None = None,
    ) -> ZarrSource:
        """Open `source`, pick the variables, and check (or make) the split manifest.

        Without a manifest or `splits` the default one is cut: contiguous train/val/test at
        0.8/0.1/0.1 (on a store too short for three splits, asking for an empty one is the
        error). A manifest cut by dates is checked against the store's time coordinate.
        Either is cut on the fine grid when the chunks' least common multiple leaves a
        split no unit of its own (`core.unit_grid.grid_manifest`).

        Args:
            source: the Zarr group: a URL or path, or an open zarr `Store`.
            variables: the arrays to load (default: every array of 2 or more dimensions
                with the time dimension); those without it are static fields (`statics`).
            manifest: the split manifest (`io.source_manifest.load_manifest` takes its forms).
            storage_options: object-store client options (obstore's).
            splits: split name -> an inclusive range of dates (`make_date_manifest`), cut
                on the store's time coordinate; instead of `manifest`.
            levels: level values to keep (`[500, 850]` for every variable with a level
                axis, or variable -> values), found in the level coordinate (`io.metadata.levels`).
            spatial_dims: the trailing grid axes (the level axis lies before them).
            decode_cf: decode values as `xr.open_zarr` does (masks, packing); False keeps
                stored values (`mask_and_scale=False`).
            use_zarr_fill_value_as_mask: as `xr.open_zarr` takes it; None picks by format.
            area: a box of latitude and longitude (`core.area`): every variable keeps only
                its grid points, found in its coordinates (`io.metadata.grid_coordinates`);
                None for the whole grid.
        """
        if splits is not None and manifest is not None:
            raise ValueError(
                "give either manifest= or splits=, not both: splits= cuts a new manifest by "
                "dates (save it with source.manifest.dumps() to reuse it)"
            )
        secrets = secrets_in(storage_options, source if isinstance(source, str) else None)
        where = describe(source, secrets)
        store = open_store(source, storage_options)
        group = open_root_group(store, where, secrets)
        arrays = arrays_of(group, where, secrets)
        selection = select_variables(arrays, variables, where, spatial_dims)
        layouts, statics = selection.fields, selection.statics
        if SAMPLE_INDEX_KEY in layouts or SAMPLE_INDEX_KEY in statics:  # a key of batches
            raise ValueError(
                f"a variable is named {SAMPLE_INDEX_KEY!r}, which batches use for the sample "
                f"indices; select the other variables explicitly"
            )
        split_manifest, geometry = fit_manifest(
            layouts,
            manifest,
            splits,
            lambda length: read_time_axis(arrays, list(layouts), length, where, secrets),
            "this store",
        )
        if levels is not None:
            picks = level_picks(arrays, layouts, levels, spatial_dims, where, secrets)
            layouts = {
                n: lay.with_picks([picks[n]]) if n in picks else lay for n, lay in layouts.items()
            }
            geometry = replace(geometry, variables=dict(layouts))  # its grid, picks added
        boxed, static_crops, area_axes = None, {}, {}
        if area is not None:
            boxed, axes = area_selection(arrays, layouts, area, where, secrets, statics)
            layouts = {
                n: lay.with_picks(boxed.picks(axes[n].latitude_axis, axes[n].longitude_axis))
                for n, lay in layouts.items()
            }
            geometry = replace(geometry, variables=dict(layouts))
            static_crops = {n: (axes[n].latitude_axis, axes[n].longitude_axis) for n in statics}
            area_axes = {n: (axes[n].latitude_axis, axes[n].longitude_axis) for n in layouts}
        codecs, fills, decodings, warnings = describe_arrays(
            arrays, [*layouts, *statics], decode_cf, use_zarr_fill_value_as_mask
        )
        snapshot = snapshot_id_of(store)
        return cls(
            store,
            where,
            layouts,
            geometry,
            split_manifest,
            codecs,
            fills,
            snapshot,
            decodings=decodings,
            decoding_warnings=warnings,
            statics=statics,
            statics_left_out=selection.statics_left_out,
            area=boxed,
            static_crops=static_crops,
            area_axes=area_axes,
            secrets=tuple(secrets),
        )

    def read_context(self, **settings: Any) -> ReadContext:
        """How to read this source's arrays, for `AsyncFetchNode`: a `ReadContext` over its
        store and variables, named in messages as `where` says (credentials redacted).

        Its block slots fit this source's unit grid (`unit_length`, unless given: on the
        fine grid a slot holds a piece of a chunk, as the memory bound counts it).

        Args:
            **settings: `ReadContext.create`'s settings (`max_inflight`, `retry`,
                `decode_threads`, `fast_path`, `zarr_pipeline`, `block_memory_bytes`,
                `unit_length`: a loader's grid of revisits, `SampleGeometry.visits`).
        """
        settings.setdefault("unit_length", self.geometry.unit_length)
        context = ReadContext.create(self.store, self.layouts, where=self.where, **settings)
        if not self.parts:
            return context
        return context.joined([(p.store, p.where, p.fields) for p in self.parts if p.fields])

    def read_statics(
        self, cast: str | None = None, retry: RetryPolicy | None = None, decode_threads: int = 1
    ) -> dict[str, np.ndarray]:
        """Each static field, read whole through the loader's reader
        (`io.reads.static_reads`) and decoded as `xr.open_zarr(url)[name]` shows it (or
        stored values, with `decode_cf=False`), cast to `cast` when given; with an area,
        cut to the box as the fields are (`AreaSelection.crop`: its shape is
        `static_shapes()`'s).

        Args:
            cast: a numpy float dtype's name to cast the values to, or None.
            retry: how transient read errors are retried (default `RetryPolicy()`).
            decode_threads: threads that decode the chunks.
        """
        stored: dict[str, np.ndarray] = {}
        for store, where, names in self._stores_of(self.statics):
            stored |= read_whole_arrays(
                store,
                {name: self.statics[name] for name in names},
                where=where,
                retry=retry,
                decode_threads=decode_threads,
            )
        decoded = {
            name: decode_values(values, self.decodings[name], cast)
            for name, values in stored.items()
        }
        if self.area is None:
            return decoded
        area = self.area
        return {n: area.crop(v, *self.static_crops[n]) for n, v in decoded.items()}

    def static_shapes(self) -> dict[str, tuple[int, ...]]:
        """Each static field's shape as batches hold it (the box's grid, with an area)."""
        if self.area is None:
            return {name: tuple(layout.shape) for name, layout in self.statics.items()}
        return {
            name: self.area.cropped_shape(layout.shape, *self.static_crops[name])
            for name, layout in self.statics.items()
        }

    def split_units(self, split: str) -> np.ndarray:
        """`split`'s units (`SplitManifest.units`).

        Args:
            split: the split's name.
        """
        return self.manifest.units(split)

    def step_ranges(self, split: str) -> np.ndarray:
        """`split`'s [start, stop) step ranges, (R, 2) (`SplitManifest.step_ranges`).

        Args:
            split: the split's name, or "all".
        """
        return self.manifest.step_ranges(split)

    def time_axis(self) -> TimeAxis:
        """The selected variables' time coordinate, read and decoded (`io.metadata.time_axis`);
        on a join, the joined axis."""
        if self.joined_time is not None:
            return self.joined_time
        group = open_root_group(self.store, self.where, self.secrets)
        arrays = arrays_of(group, self.where, self.secrets)
        length = self.geometry.num_samples
        return read_time_axis(arrays, list(self.layouts), length, self.where, self.secrets)

    def grid_coordinates(self, spatial_dims: int) -> GridCoordinates:
        """The selected variables' grid latitude and longitude as batches hold the grid,
        read and decoded (`io.metadata.grid_coordinates`): with an area, the box's rows
        and columns in the batch's order, so that forcings lie where the fields do.

        Args:
            spatial_dims: the trailing grid axes of each variable.
        """
        [(store, where, names), *_] = self._stores_of(self.layouts)
        group = open_root_group(store, where, self.secrets)
        arrays = arrays_of(group, where, self.secrets)
        found = read_grid_coordinates(arrays, names, spatial_dims, where, self.secrets)
        if self.area is None:
            return found
        name, layout = next(iter(self.layouts.items()))
        first = len(layout.shape) - spatial_dims  # the grid's first axis in the array
        lat_axis, lon_axis = (axis - first for axis in self.area_axes[name])
        if min(lat_axis, lon_axis) < 0:
            raise ValueError(
                f"area= crops the axes {list(self.area_axes[name])} of {name!r}, and the "
                f"forcings are computed on its last {spatial_dims} axes, which leave one of "
                f"them out; pass spatial_dims= to take in its latitude and longitude axes"
            )
        return replace(
            found,
            latitude=_cropped(found.latitude, self.area, lat_axis, lon_axis),
            longitude=_cropped(found.longitude, self.area, lat_axis, lon_axis),
        )

    def fingerprint(
        self, split: str, anchors: np.ndarray | None = None, cast: str | None = None
    ) -> dict[str, Any]:
        """What a loader over `split` of this source reads (arrays, codecs, how their
        values are decoded, the split's units, the Icechunk snapshot), as plain data for
        `ChunkPermuteNode(fingerprint=...)`: a state saved on other data or other values
        is then refused instead of resumed into other batches.

        Args:
            split: the split the loader reads.
            anchors: the anchors it draws from (`AnchorSet.anchors`), recorded too when
                given (a date boundary inside a unit, a stride or a gap rule changes them
                and not the units).
            cast: the dtype batches are cast to (`build_loader(dtype=...)`), or None.
        """
        fingerprint = source_fingerprint(
            self.layouts,
            self.codecs,
            self.fill_values,
            split,
            self.split_units(split),
            self.snapshot_id,
            anchors,
            self.decoding_records(cast),
            statics=self.statics,
            phase=self.geometry.phase,
        )
        if self.area is not None:
            fingerprint[AREA_KEY] = self.area.record()
        if self.join is not None:
            fingerprint[JOIN_KEY] = join_record(self.join, [p.record() for p in self.parts])
        return fingerprint

    def _stores_of(self, names: Iterable[str]) -> list[tuple[Store, str, list[str]]]:
        """The stores holding `names` (each with its description and its names among
        them, in order): this store, or a join's stores that hold some."""
        wanted = list(names)
        if not self.parts:
            return [(self.store, self.where, wanted)] if wanted else []
        found = []
        for part in self.parts:
            held = [n for n in wanted if n in part.fields or n in part.statics]
            if held:
                found.append((part.store, part.where, held))
        return found

    def decoding_records(self, cast: str | None = None) -> dict[str, dict[str, Any]]:
        """Each variable's decoding as plain data (`CFDecoding.record`, with the dtype
        batches are cast to), what fingerprints and statistics keep.

        Args:
            cast: the dtype batches are cast to, or None for the decoded dtype.
        """
        records = {}
        for name, decoding in self.decodings.items():
            record = decoding.record()
            if cast is not None and cast != decoding.decoded_dtype:
                record[YIELDS_KEY] = cast
            records[name] = record
        return records


def _cropped(values: np.ndarray, area: AreaSelection, lat_axis: int, lon_axis: int) -> np.ndarray:
    """Coordinates shaped to broadcast against the whole grid cut to the box, in the
    batch's order: the rows taken along the latitude axis and the columns along the
    longitude axis, where they vary (an axis of length 1 broadcasts as it is)."""
    if values.shape[lat_axis] > 1:
        values = np.take(values, area.rows, axis=lat_axis)
    if values.shape[lon_axis] > 1:
        values = np.take(values, area.columns, axis=lon_axis)
    return values
