"""`insitubatch inspect`: what a store holds and what the loader's defaults make of it.

Before a first training run a user wants to know, without reading a byte of data or
writing a line of code: which arrays the loader would take, how they are chunked and
compressed, how many time steps a read brings, how big a chunk is stored and decoded, the
time range, and what `build_loader`'s defaults choose on this host (the memory budget
and decode threads from its memory, cores and ranks, with why), or why they do not fit
and which budget would. `inspect_store` gathers that into a `StoreReport` (plain data,
`to_json`), `format_report` lays it out for a terminal. Each array's part is
`cli.array_report`'s, each store of a join's `cli.joined_stores_report`'s.

What it reads: the group's metadata, the stored sizes of a few chunks (a size request per
chunk, or the index of a few shards of a sharded array), and three values of the time
coordinate. The loader's settings come from the functions a loader's plan calls
(`cli.defaults_report`: `builder.split_anchors.plan_split`,
`builder.loader_choices.choose_loader_settings`, the device default of `builder.placement`),
so what is printed is what a loader built with the same settings on this host would choose.

Everything printed names the store as `ZarrSource.where` does: credentials redacted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from insitubatch_nodes.builder.time_selection import Duration
from insitubatch_nodes.cli.array_report import ArrayReport, array_report
from insitubatch_nodes.cli.defaults_report import LoaderDefaults, loader_defaults
from insitubatch_nodes.cli.joined_stores_report import (
    JoinedStoreReport,
    OpenedStore,
    joined_store_reports,
    opened_stores,
    static_fields_only,
)
from insitubatch_nodes.core.area import Area, AreaSelection
from insitubatch_nodes.core.cf_decoding import describe_record
from insitubatch_nodes.core.cf_time import dates_text, step_text
from insitubatch_nodes.core.forcing_names import check_forcing_names
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.sample_spec import SampleSpec, leads, window
from insitubatch_nodes.core.settings import as_int, as_optional_int
from insitubatch_nodes.io.host.host_resources import HostResources
from insitubatch_nodes.io.joined_source import open_source
from insitubatch_nodes.io.metadata.time_axis import cf_attributes, decode_dates, find_time_array
from insitubatch_nodes.io.metadata.zarr_compat import run_on_zarr_loop
from insitubatch_nodes.io.reads.stored_sizes import (
    DEFAULT_SAMPLED_CHUNKS,
    StoredSizes,
    measure_stored_sizes,
)
from insitubatch_nodes.io.source_manifest import ManifestLike
from insitubatch_nodes.io.zarr_source import ZarrSource


@dataclass(frozen=True)
class TimeReport:
    """The group's time coordinate: its range, decoded when the loader decodes it (in its
    calendar: a `noleap` date is written as that calendar names it).

    Args:
        name: the coordinate array's name.
        count: its length (the samples along axis 0).
        units: its `units` attribute, or None.
        calendar: its `calendar` attribute, or None.
        decoded: whether `first`, `last` and `step` are dates (else the stored values).
        first: the first value, as text.
        last: the last value, as text.
        step: the difference of the first two values, as text, or None with one value.
    """

    name: str
    count: int
    units: str | None
    calendar: str | None
    decoded: bool
    first: str
    last: str
    step: str | None


@dataclass(frozen=True)
class AreaReport:
    """The box `--area` asks for, on the store's grid: what a loader with `area=` reads.

    Args:
        box: `[north, west, south, east]`, as given.
        grid: (latitudes, longitudes) of the box's grid points.
        latitudes: the first and last latitude, in the batch's (the stored) order.
        longitudes: the first and last longitude, in the batch's order (eastward).
        chunks: per array, `[touched, all]`: the chunks of one time step's grid (and
            levels) the box touches, and all of them; their ratio is the fraction of the
            reads (and decoded bytes, edge chunks aside) a loader with the area makes.
    """

    box: tuple[float, ...]
    grid: tuple[int, int]
    latitudes: tuple[float, float]
    longitudes: tuple[float, float]
    chunks: Mapping[str, tuple[int, int]]


@dataclass(frozen=True)
class StoreReport:
    """Everything `insitubatch inspect` prints.

    Args:
        store: the store, as messages name it (credentials redacted).
        zarr_format: 2 or 3.
        arrays: the selected arrays, in the loader's order.
        others: the group's other arrays, by name, with their shapes.
        time: the time coordinate, or None when the group has none.
        loader: the defaults `build_loader` would choose.
        decoding: each selected array's values as batches hold them (decoded as
            `xr.open_zarr` decodes them), in words.
        warnings: what the decoding may surprise a user with (a Zarr v2 `fill_value` of 0
            that masks every stored 0), as the loader logs it.
        statics: the selected static fields (no time dimension, read once), by name,
            with their shapes.
        area: the box `--area` asks for on the store's grid, or None.
        forcings: the forcings `--forcings` asks for, computed per batch, in order.
        join: the join policy when several stores are joined, else None.
        stores: each store of a join, in the order given (empty for one store).
        static_only: for one store that holds static fields only (no time coordinate,
            every array on the grid alone), those fields: it joins by grid alone, and
            read by itself its first grid axis would pass for time.
    """

    store: str
    zarr_format: int
    arrays: tuple[ArrayReport, ...]
    others: Mapping[str, tuple[int, ...]]
    time: TimeReport | None
    loader: LoaderDefaults
    decoding: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    statics: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    area: AreaReport | None = None
    forcings: tuple[str, ...] = ()
    join: str | None = None
    stores: tuple[JoinedStoreReport, ...] = ()
    static_only: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON data (tuples as lists, the memory plan as a dict)."""
        return _plain(asdict(self))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def inspect_store(
    source: str | Path | Sequence[str | Path],
    variables: Sequence[str] | None = None,
    *,
    split: str = "all",
    batch_size: int = 32,
    memory_budget: int | None = None,
    storage_options: dict[str, Any] | None = None,
    manifest: ManifestLike | None = None,
    device: str | None = None,
    sampled_chunks: int = DEFAULT_SAMPLED_CHUNKS,
    host: HostResources | None = None,
    window_steps: int = 1,
    lead_steps: int = 0,
    revisits: int = 1,
    stride: int | None = None,
    frequency: Duration | None = None,
    stack: bool = False,
    area: Area | None = None,
    forcings: Sequence[str] | None = None,
    join: str = "exact",
) -> StoreReport:
    """Describe `source` and the settings `build_loader` would choose for it.

    Opened as `build_loader` opens it (`open_source`), so an unknown variable, a missing
    store, a bad option or stores that do not join fail with the loader's own message; a
    budget too small for the defaults is not an error here but part of the report, with
    the least budget that fits. A join is reported as one source (its arrays, the joined
    time axis, the loader's defaults over every store) and store by store (what each
    gives, the steps `join="inner"` leaves out of each, how many steps one read brings).

    Args:
        source: the Zarr group: a URL or a local path, as `build_loader` takes; or a list
            of them, joined as `build_loader` joins them.
        variables: the arrays to describe (default: those the loader would load).
        split: the split to plan for (`"all"`, `"train"`, ... or a manifest's own).
        batch_size: samples per batch to plan for.
        memory_budget: bytes the loader may hold, to plan for, or None for
            `build_loader`'s default (the host's share).
        storage_options: obstore client options, as `build_loader` takes them (for a
            join: one dict for every store, or a list with one per store).
        manifest: the split manifest, as `build_loader` takes it (default: 0.8/0.1/0.1).
        device: "cpu" or "cuda" to plan for (default: this host's, as `build_loader`).
        sampled_chunks: stored objects (chunks, or shards) measured per array.
        host: the host to plan for (default `HostResources.read()`, as `build_loader`).
        window_steps: plan for samples whose inputs are every variable over this many
            steps up to the anchor (`window(variables, window_steps)`): 1 for none.
        lead_steps: and whose targets are every variable this many steps after it
            (`leads(variables, [lead_steps])`): 0 for none. Windows and leads make each
            unit hold the neighbouring chunks they reach into, which shrinks the pool.
        revisits: plan for `build_loader(revisits=...)`: each unit read this many times
            per epoch, each visit keeping its share of the unit's samples, so the pool
            counts visits (`SampleGeometry.visits`).
        stride: plan for `build_loader(stride=...)`: every k-th step an anchor, windows and
            leads counted in strides, dealt in the units the stride fits
            (`core.stride_units`); None for every step.
        frequency: plan for `build_loader(frequency=...)` ("6h") instead of a stride.
        stack: plan for `build_loader(stack=True)`: report the channel list (variables,
            levels, static fields), and count the statics' stacked copies.
        area: plan for `build_loader(area=...)`: the box's grid, the chunks it touches
            (the loader's defaults count only those), or None for the whole grid.
        forcings: plan for `build_loader(forcings=...)`: what they keep on the memory
            plan's "forcings" line, a batch's of them in the batches, and with `stack`
            their channels; None for none. Refused as `build_loader` refuses them.
        join: how a list of stores is aligned on time, as `build_loader` takes it.
    """
    batch_size = as_int("batch_size", batch_size, minimum=1)
    window_steps = as_int("window_steps", window_steps, minimum=1)
    lead_steps = as_int("lead_steps", lead_steps, minimum=0)
    revisits = as_int("revisits", revisits, minimum=1)
    memory_budget = as_optional_int("memory_budget", memory_budget, minimum=1)
    sampled_chunks = as_int("sampled_chunks", sampled_chunks, minimum=1)
    forcing_names = check_forcing_names(forcings)
    opened = open_source(
        source,
        variables,
        manifest=manifest,
        storage_options=storage_options,
        area=area,
        join=join,
    )
    stores = opened_stores(opened, source, storage_options)
    arrays = {n: a for opened_store in reversed(stores) for n, a in opened_store.arrays.items()}
    selected = {name: arrays[name] for name in opened.layouts}
    sizes: dict[str, tuple[StoredSizes, StoredSizes | None]] = {}
    for opened_store in stores:
        mine = {n: a for n, a in opened_store.arrays.items() if n in opened_store.fields}
        sizes |= run_on_zarr_loop(measure_stored_sizes(opened_store.store, mine, sampled_chunks))
    reports = tuple(array_report(name, selected[name], *sizes[name]) for name in selected)
    statics = opened.static_shapes()
    others = {
        name: tuple(a.shape)
        for name, a in sorted(arrays.items())
        if name not in selected and name not in statics
    }
    secrets = frozenset().union(*(s.secrets for s in stores))
    if opened.parts:
        time = _joined_time_report(opened, stores)
    else:
        time = _time_report(arrays, reports, opened.geometry.num_samples)
    loader = loader_defaults(
        opened,
        split,
        batch_size=batch_size,
        memory_budget=memory_budget,
        device=device,
        mean_read_bytes=_mean_read_bytes(reports, opened.layouts, opened.geometry.unit_length),
        secrets=secrets,
        host=host,
        spec=_spec(list(opened.layouts), window_steps, lead_steps),
        revisits=revisits,
        stride=stride,
        frequency=frequency,
        stack=stack,
        forcings=forcing_names,
    )
    decoding = {name: describe_record(r) for name, r in opened.decoding_records().items()}
    return StoreReport(
        opened.where,
        stores[0].zarr_format,
        reports,
        others,
        time,
        loader,
        decoding,
        opened.decoding_warnings,
        statics,
        None if opened.area is None else _area_report(opened.area, opened.layouts),
        forcing_names,
        opened.join,
        joined_store_reports(opened, stores, source, storage_options),
        () if opened.parts else static_fields_only(stores[0].arrays),
    )


def _area_report(selection: AreaSelection, layouts: Mapping[str, VariableLayout]) -> AreaReport:
    """The box's grid and, per array, the chunks of one time step it touches of all."""
    chunks = {}
    for name, layout in layouts.items():
        inner = zip(layout.shape[1:], layout.chunks[1:], strict=True)
        every = math.prod(-(-s // c) for s, c in inner)
        chunks[name] = (len(layout.inner_chunk_grid()), every)
    lat, lon = selection.latitudes, selection.longitudes
    return AreaReport(
        tuple(selection.area.to_list()),
        selection.shape,
        (float(lat[0]), float(lat[-1])),
        (float(lon[0]), float(lon[-1])),
        chunks,
    )


def _spec(variables: list[str], window_steps: int, lead_steps: int) -> SampleSpec | None:
    """Samples of every variable over a window and a lead, or None for one step each."""
    if window_steps == 1 and lead_steps == 0:
        return None
    groups = {"inputs": window(variables, window_steps)}
    if lead_steps:
        groups["targets"] = leads(variables, [lead_steps])
    return SampleSpec(groups)


# --- the time coordinate ------------------------------------------------------------------


def _time_report(
    arrays: Mapping[str, zarr.Array], reports: Sequence[ArrayReport], length: int
) -> TimeReport | None:
    found = find_time_array(arrays, [r.name for r in reports], length)
    if found is None:
        return None
    name, array = found
    raw = np.concatenate([np.asarray(array[0:2]), np.asarray(array[-1:])])  # 3 values at most
    units, calendar = cf_attributes(array)
    decoded = _dates(raw, units, calendar, name)
    step: str | None = None
    if decoded is not None:
        dates, named = decoded
        first, _, last = dates_text(dates, None, named)
        if length > 1:
            step = step_text(dates[1] - dates[0])
    else:
        first, last = str(raw[0].item()), str(raw[-1].item())
        if length > 1 and raw.dtype.kind in "iuf":
            step = str((raw[1] - raw[0]).item())
    return TimeReport(name, length, units, calendar, decoded is not None, first, last, step)


def _joined_time_report(opened: ZarrSource, stores: Sequence[OpenedStore]) -> TimeReport:
    """The joined time axis: the dates every store's variables are read at, named and
    attributed as the first store that has it keeps its time coordinate."""
    axis = opened.time_axis()
    found = next(s.arrays[axis.name] for s in stores if axis.name in s.arrays)
    units, calendar = cf_attributes(found)
    first, last = axis.text(axis.dates[[0, -1]])
    step = step_text(axis.dates[1] - axis.dates[0]) if axis.dates.size > 1 else None
    return TimeReport(axis.name, int(axis.dates.size), units, calendar, True, first, last, step)


def _dates(
    raw: np.ndarray, units: str | None, calendar: str | None, name: str
) -> tuple[np.ndarray, str] | None:
    """The values as dates and the calendar to write them in, where the loader decodes
    them; None where it does not (the report shows the stored values)."""
    try:
        return decode_dates(raw, units, calendar, name)
    except ValueError:
        return None


# --- the loader's defaults ----------------------------------------------------------------


def _mean_read_bytes(
    reports: Sequence[ArrayReport], layouts: Mapping[str, VariableLayout], unit_steps: int
) -> float | None:
    """Mean stored bytes of one chunk read over a unit of every array (what the in-flight
    target divides its byte allowance by), from the sampled sizes."""
    reads = 0
    nbytes = 0.0
    for report in reports:
        layout = layouts[report.name]
        per_unit = unit_steps // layout.sample_chunk * len(layout.inner_chunk_grid())
        if report.stored_chunk.mean is None:
            continue
        reads += per_unit
        nbytes += per_unit * report.stored_chunk.mean
    return nbytes / reads if reads else None
