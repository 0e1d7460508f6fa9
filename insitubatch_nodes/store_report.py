"""`insitubatch inspect`: what a store holds and what the loader's defaults make of it.

Before a first training run a user wants to know, without reading a byte of data or
writing a line of code: which arrays the loader would take, how they are chunked and
compressed, how many time steps a read brings, how big a chunk is stored and decoded, the
time range, and whether `build_loader`'s defaults fit this host's memory budget (and if
not, which budget would). `inspect_store` gathers that into a `StoreReport` (plain data,
`to_json`), `format_report` lays it out for a terminal.

What it reads: the group's metadata, the stored sizes of a few chunks (a size request per
chunk, or the index of a few shards of a sharded array), and three values of the time
coordinate. The loader's settings come from the same functions `build_loader` calls
(`split_anchors`, `plan_loader_memory`, the device and decode-thread defaults), so what is
printed is what a loader built with the same settings would choose.

Everything printed names the store as `ZarrSource.where` does: credentials redacted.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import obstore.exceptions
import torch
import zarr
from zarr.abc.store import RangeByteRequest, Store, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype

from insitubatch_nodes.builder import split_anchors
from insitubatch_nodes.byte_sizes import parse_nbytes, size_argument
from insitubatch_nodes.cf_time import SINCE, dates_text, decode_cf_times, step_text
from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.inflight_target import CEILING
from insitubatch_nodes.core.memory_bound import (
    DEFAULT_MEMORY_BUDGET,
    MemoryPlan,
    plan_loader_memory,
)
from insitubatch_nodes.core.settings import as_int
from insitubatch_nodes.io.chunk_errors import ChunkBytesError
from insitubatch_nodes.io.event_loop import default_decode_threads
from insitubatch_nodes.io.redact import redact, secrets_in
from insitubatch_nodes.io.shard_index import EMPTY, shard_layout
from insitubatch_nodes.io.zarr_compat import chunk_key, run_on_zarr_loop
from insitubatch_nodes.io.zarr_layout import arrays_of, open_root_group
from insitubatch_nodes.io.zarr_source import ManifestLike, ZarrSource
from insitubatch_nodes.nodes.pin_to_device import PinToDeviceNode, default_prefetch

DEFAULT_SAMPLED_CHUNKS = 3  # stored objects measured per array: a size request each
TIME_NAMES = ("time", "valid_time", "date", "dates")  # checked after the variables' axis 0
LARGEST_BUDGET = 1 << 50  # bytes: the search for a budget that fits gives up beyond it


@dataclass(frozen=True)
class StoredSizes:
    """Stored bytes of a few chunks (or shards), measured, not the whole array's.

    Args:
        how: what was measured: "chunk objects" (a size request per chunk), "shard
            indexes" (inner chunk sizes from the index of a few shards), or "shard size /
            chunks per shard" (when the index is not one the library reads).
        sampled: stored objects (or index entries) measured.
        missing: of those, never written (they read as the fill value).
        of: how many there are in the array.
        mean: mean bytes of those present, or None when none is.
        smallest: fewest bytes among them, or None.
        largest: most bytes among them, or None.
        failed: why nothing could be measured (the store refused a size request, say),
            or None. The rest of the report does not depend on it, so it is not an error.
    """

    how: str
    sampled: int
    missing: int
    of: int
    mean: float | None
    smallest: int | None
    largest: int | None
    failed: str | None = None

    @classmethod
    def unmeasured(cls, how: str, of: int, why: str) -> StoredSizes:
        """Sizes that could not be measured, and why.

        Args:
            how: what was to be measured (see the class).
            of: how many there are in the array.
            why: the reason, for the report.
        """
        return cls(how, 0, 0, of, None, None, None, why)

    @classmethod
    def of_sizes(cls, how: str, sizes: Sequence[int | None], of: int) -> StoredSizes:
        """Summarise measured sizes (None for an object never written).

        Args:
            how: what was measured (see the class).
            sizes: one per measured object, None where it is missing.
            of: how many there are in the array.
        """
        present = [s for s in sizes if s is not None]
        return cls(
            how,
            len(sizes),
            len(sizes) - len(present),
            of,
            float(np.mean(present)) if present else None,
            min(present) if present else None,
            max(present) if present else None,
        )


@dataclass(frozen=True)
class ArrayReport:
    """One selected array as the loader sees it.

    Args:
        name: the array's name in the group.
        dims: its dimension names (Zarr v3 `dimension_names`, or xarray's
            `_ARRAY_DIMENSIONS` attribute), or None when the store names none.
        shape: its shape.
        dtype: its element type, as numpy spells it (stored byte order).
        chunks: its chunk shape (the inner chunk when sharded): what one decode yields.
        shards: its shard shape (one stored object), or None when not sharded.
        codecs: the codec chain in short, with the compressor's settings.
        chunk_count: chunks (inner chunks when sharded) in the array.
        decoded_chunk_bytes: bytes of one decoded chunk.
        stored_chunk: stored bytes per chunk, sampled.
        stored_shard: stored bytes per shard, sampled, or None when not sharded.
        steps_per_chunk: samples (time steps) in one chunk: what one read brings.
        steps_per_shard: samples in one shard, or None when not sharded.
    """

    name: str
    dims: tuple[str, ...] | None
    shape: tuple[int, ...]
    dtype: str
    chunks: tuple[int, ...]
    shards: tuple[int, ...] | None
    codecs: str
    chunk_count: int
    decoded_chunk_bytes: int
    stored_chunk: StoredSizes
    stored_shard: StoredSizes | None
    steps_per_chunk: int
    steps_per_shard: int | None


@dataclass(frozen=True)
class TimeReport:
    """The group's time coordinate: its range, decoded when its CF units are simple.

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
class LoaderDefaults:
    """What `build_loader` would choose for these settings on this host.

    Args:
        split: the split planned for.
        split_samples: its samples (time steps).
        unit_steps: steps in one unit (what the loader shuffles and splits by).
        batch_size: samples per batch.
        memory_budget: the budget, in bytes.
        device: where batches would go ("cpu" or "cuda").
        batches_held: gathered batches alive at once (the staging ring on CUDA).
        decode_threads: threads of the decode pool.
        block_chunks: units per block, or None when refused.
        block_samples: buffer rows of one block, at most, or None when refused.
        plan: how the budget splits (`MemoryPlan`), or None when refused.
        reads_in_flight: about how many reads of this store's stored chunks the
            budget's share for reads in flight holds (at most the ceiling), or None.
        refused: the loader's refusal (a budget too small), or None.
        fitting_budget: a budget the defaults fit in (one byte less does not), when refused.
        fitting_argument: that budget as a `--memory-budget` value, short to type.
    """

    split: str
    split_samples: int
    unit_steps: int
    batch_size: int
    memory_budget: int
    device: str
    batches_held: int
    decode_threads: int
    block_chunks: int | None
    block_samples: int | None
    plan: MemoryPlan | None
    reads_in_flight: int | None
    refused: str | None
    fitting_budget: int | None
    fitting_argument: str | None


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
    """

    store: str
    zarr_format: int
    arrays: tuple[ArrayReport, ...]
    others: Mapping[str, tuple[int, ...]]
    time: TimeReport | None
    loader: LoaderDefaults

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
    source: str | Path,
    variables: Sequence[str] | None = None,
    *,
    split: str = "all",
    batch_size: int = 32,
    memory_budget: int = DEFAULT_MEMORY_BUDGET,
    storage_options: dict[str, Any] | None = None,
    manifest: ManifestLike | None = None,
    device: str | None = None,
    sampled_chunks: int = DEFAULT_SAMPLED_CHUNKS,
) -> StoreReport:
    """Describe `source` and the settings `build_loader` would choose for it.

    Opened as `build_loader` opens it (`ZarrSource.open`), so an unknown variable, a
    missing store or a bad option fails with the loader's own message; a budget too small
    for the defaults is not an error here but part of the report, with the least budget
    that fits.

    Args:
        source: the Zarr group: a URL or a local path, as `build_loader` takes.
        variables: the arrays to describe (default: those the loader would load).
        split: the split to plan for (`"all"`, `"train"`, ... or a manifest's own).
        batch_size: samples per batch to plan for.
        memory_budget: bytes the loader may hold, to plan for.
        storage_options: obstore client options, as `build_loader` takes them.
        manifest: the split manifest, as `build_loader` takes it (default: 0.8/0.1/0.1).
        device: "cpu" or "cuda" to plan for (default: this host's, as `build_loader`).
        sampled_chunks: stored objects (chunks, or shards) measured per array.
    """
    batch_size = as_int("batch_size", batch_size, minimum=1)
    memory_budget = as_int("memory_budget", memory_budget, minimum=1)
    sampled_chunks = as_int("sampled_chunks", sampled_chunks, minimum=1)
    opened = ZarrSource.open(source, variables, manifest=manifest, storage_options=storage_options)
    secrets = secrets_in(storage_options, source if isinstance(source, str) else None)
    group = open_root_group(opened.store, opened.where, secrets)
    arrays = arrays_of(group, opened.where, secrets)
    selected = {name: arrays[name] for name in opened.layouts}
    sizes = run_on_zarr_loop(_measure_all(opened.store, selected, sampled_chunks))
    reports = tuple(_array_report(name, selected[name], *sizes[name]) for name in selected)
    others = {name: tuple(a.shape) for name, a in sorted(arrays.items()) if name not in selected}
    time = _time_report(arrays, reports, opened.geometry.num_samples)
    loader = _loader_defaults(
        opened,
        split,
        batch_size=batch_size,
        memory_budget=memory_budget,
        device=device,
        mean_read_bytes=_mean_read_bytes(reports, opened.layouts, opened.geometry.unit_length),
        secrets=secrets,
    )
    return StoreReport(opened.where, group.metadata.zarr_format, reports, others, time, loader)


# --- the arrays ---------------------------------------------------------------------------


def dimension_names(array: zarr.Array) -> tuple[str, ...] | None:
    """The array's dimension names: Zarr v3 `dimension_names`, else the
    `_ARRAY_DIMENSIONS` attribute xarray writes (Zarr v2); None when neither names all.

    Args:
        array: an opened zarr array.
    """
    names = getattr(array.metadata, "dimension_names", None)
    if names is None:
        names = array.attrs.get("_ARRAY_DIMENSIONS")
    if not isinstance(names, list | tuple) or len(names) != array.ndim:
        return None
    if any(not isinstance(n, str) for n in names):
        return None
    return tuple(names)


_COMPRESSOR_SETTINGS = {
    "zstd": ("level",),
    "blosc": ("cname", "clevel", "shuffle"),
    "gzip": ("level",),
    "zlib": ("level",),
    "bz2": ("level",),
    "lzma": ("preset",),
    "lz4": ("acceleration",),
}
_V2_SHUFFLE = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle", -1: "autoshuffle"}


def _codec_text(name: str, config: Mapping[str, Any]) -> str:
    values = []
    for key in _COMPRESSOR_SETTINGS.get(name, ()):
        value = config.get(key)
        if value is None:
            continue
        if name == "blosc" and key == "shuffle" and isinstance(value, int):
            value = _V2_SHUFFLE.get(value, value)  # v2 numcodecs numbers its shuffles
        values.append(f"{key}={value}")
    return f"{name}({','.join(values)})" if values else name


def _v3_chain(codecs: Iterable[Mapping[str, Any]]) -> str:
    parts = []
    for codec in codecs:
        config = codec.get("configuration") or {}
        if config.get("codecs"):
            parts.append(f"{codec['name']}({_v3_chain(config['codecs'])})")
        else:
            parts.append(_codec_text(str(codec["name"]), config))
    return "+".join(parts)


def codecs_in_short(array: zarr.Array) -> str:
    """The codec chain with the compressor's settings, e.g. "bytes+zstd(1)",
    "sharding_indexed(bytes+blosc(lz4,5,shuffle))", or Zarr v2's filters then compressor.
    Unlike `array_metadata.codec_summary` (names only, for the fingerprint), the settings
    show here: they decide how well the data compresses and how fast it decodes.

    Args:
        array: an opened zarr array.
    """
    metadata = array.metadata.to_dict()
    if "codecs" in metadata:
        return _v3_chain(metadata["codecs"] or ()) or "none"
    chain = [*(metadata.get("filters") or ()), metadata.get("compressor")]
    return "+".join(_codec_text(str(c["id"]), c) for c in chain if c is not None) or "none"


def sample_coords(counts: Sequence[int], how_many: int) -> list[tuple[int, ...]]:
    """`how_many` coordinates spread evenly (first, ..., last in C order) over a grid of
    `counts` chunks per axis; every one when the grid has no more.

    Args:
        counts: chunks (or shards) per axis.
        how_many: coordinates wanted.
    """
    total = math.prod(counts)
    if total == 0:
        return []
    if total <= how_many:
        picks = range(total)
    elif how_many == 1:
        picks = range(1)
    else:
        picks = sorted({round(i * (total - 1) / (how_many - 1)) for i in range(how_many)})
    return [tuple(int(c) for c in np.unravel_index(i, tuple(counts))) for i in picks]


def _grid_to_sample(shape: Sequence[int], outer: Sequence[int]) -> list[int]:
    """Whole chunks per axis where every axis has one, so that a ragged edge chunk (smaller
    when compressed) does not stand for the rest; else every chunk."""
    full = [s // c for s, c in zip(shape, outer, strict=True)]
    if all(f >= 1 for f in full):
        return full
    return [-(-s // c) for s, c in zip(shape, outer, strict=True)]


_NOT_THERE = (FileNotFoundError, obstore.exceptions.NotFoundError)


class _Unmeasured(Exception):
    """A size request the store refused or failed: the sizes stay unknown."""


async def _size_of(store: Store, key: str) -> int | None:
    try:
        return int(await store.getsize(key))
    except _NOT_THERE:
        return None
    except (OSError, obstore.exceptions.BaseError) as err:
        # Some stores answer GET but not HEAD (moto's bucket policies, some HTTP
        # servers); obstore's text is long and echoes the request, so name the kind only.
        raise _Unmeasured(f"{type(err).__name__} asking the size of {key!r}") from None


async def _index_sizes(store: Store, key: str, array: zarr.AsyncArray) -> list[int | None]:  # type: ignore[type-arg]
    """Stored bytes of each inner chunk of shard `key` (None where never written), from
    the shard's index: one ranged read of a few bytes per inner chunk."""
    layout = shard_layout(array)
    assert layout is not None
    size = layout.index_nbytes
    where = SuffixByteRequest(size) if layout.index_at_end else RangeByteRequest(0, size)
    try:
        found = await store.get(key, default_buffer_prototype(), byte_range=where)
        if found is None:  # the shard was never written: every inner chunk is missing
            return [None] * math.prod(layout.chunks_per_shard)
        index = layout.parse_index(found.to_bytes())
    except ChunkBytesError as err:
        raise _Unmeasured(f"the index of shard {key!r} is unreadable: {err.reason}") from None
    except (OSError, obstore.exceptions.BaseError) as err:
        raise _Unmeasured(f"{type(err).__name__} reading the index of {key!r}") from None
    empty = (index[:, 0] == EMPTY) & (index[:, 1] == EMPTY)
    return [
        None if e else int(n) for e, n in zip(empty.tolist(), index[:, 1].tolist(), strict=True)
    ]


async def _measure(
    store: Store,
    array: zarr.Array,
    how_many: int,
) -> tuple[StoredSizes, StoredSizes | None]:
    """Stored sizes of a few of `array`'s chunks (and shards): size requests, all at once;
    for a sharded array whose index the library reads, the sizes of the inner chunks of a
    few shards, from their indexes."""
    inner = tuple(array.chunks)
    chunk_count = math.prod(-(-s // c) for s, c in zip(array.shape, inner, strict=True))
    shards = array.shards
    outer = inner if shards is None else tuple(shards)
    coords = sample_coords(_grid_to_sample(array.shape, outer), how_many)
    prefix = array.async_array.store_path.path
    keys = [chunk_key(array.metadata, prefix, c) for c in coords]
    try:
        sizes = await asyncio.gather(*(_size_of(store, key) for key in keys))
    except _Unmeasured as err:
        return StoredSizes.unmeasured("chunk objects", chunk_count, str(err)), None
    if shards is None:
        return StoredSizes.of_sizes("chunk objects", sizes, chunk_count), None
    shard_count = math.prod(-(-s // c) for s, c in zip(array.shape, outer, strict=True))
    per_shard = math.prod(s // c for s, c in zip(outer, inner, strict=True))
    stored_shard = StoredSizes.of_sizes("shard objects", sizes, shard_count)
    if shard_layout(array.async_array) is None:
        averaged = [None if s is None else round(s / per_shard) for s in sizes]
        how = "shard size / chunks per shard"
        return StoredSizes.of_sizes(how, averaged, chunk_count), stored_shard
    try:
        indexes = await asyncio.gather(
            *(_index_sizes(store, key, array.async_array) for key in keys)
        )
    except _Unmeasured as err:
        return StoredSizes.unmeasured("shard indexes", chunk_count, str(err)), stored_shard
    entries = [size for index in indexes for size in index]
    return StoredSizes.of_sizes("shard indexes", entries, chunk_count), stored_shard


async def _measure_all(
    store: Store, arrays: Mapping[str, zarr.Array], how_many: int
) -> dict[str, tuple[StoredSizes, StoredSizes | None]]:
    found = await asyncio.gather(*(_measure(store, a, how_many) for a in arrays.values()))
    return dict(zip(arrays, found, strict=True))


def _array_report(
    name: str, array: zarr.Array, stored_chunk: StoredSizes, stored_shard: StoredSizes | None
) -> ArrayReport:
    dtype = np.dtype(array.dtype)
    chunks = tuple(int(c) for c in array.chunks)
    shards = None if array.shards is None else tuple(int(s) for s in array.shards)
    return ArrayReport(
        name=name,
        dims=dimension_names(array),
        shape=tuple(int(s) for s in array.shape),
        dtype=dtype.str if dtype.byteorder == ">" else dtype.name,
        chunks=chunks,
        shards=shards,
        codecs=codecs_in_short(array),
        chunk_count=stored_chunk.of,
        decoded_chunk_bytes=math.prod(chunks) * dtype.itemsize,
        stored_chunk=stored_chunk,
        stored_shard=stored_shard,
        steps_per_chunk=chunks[0],
        steps_per_shard=None if shards is None else shards[0],
    )


# --- the time coordinate ------------------------------------------------------------------


def _time_array(
    arrays: Mapping[str, zarr.Array], reports: Sequence[ArrayReport], length: int
) -> tuple[str, zarr.Array] | None:
    """The 1-D array of `length` values that names the variables' first axis, else one
    with a usual time name, else one whose attributes say it is time (CF `axis: T`,
    `standard_name: time`, or units "... since ...")."""

    def fits(name: str) -> bool:
        array = arrays.get(name)
        return array is not None and array.ndim == 1 and array.shape[0] == length

    first_dims = [r.dims[0] for r in reports if r.dims]
    for name in [*first_dims, *TIME_NAMES]:
        if fits(name):
            return name, arrays[name]
    for name, array in sorted(arrays.items()):
        attrs = array.attrs
        units = attrs.get("units")
        timely = (
            attrs.get("axis") == "T"
            or attrs.get("standard_name") == "time"
            or (isinstance(units, str) and SINCE.match(units) is not None)
        )
        if timely and fits(name):
            return name, array
    return None


def _time_report(
    arrays: Mapping[str, zarr.Array], reports: Sequence[ArrayReport], length: int
) -> TimeReport | None:
    found = _time_array(arrays, reports, length)
    if found is None:
        return None
    name, array = found
    raw = np.concatenate([np.asarray(array[0:2]), np.asarray(array[-1:])])  # 3 values at most
    units = array.attrs.get("units")
    calendar = array.attrs.get("calendar")
    units = units if isinstance(units, str) else None
    calendar = calendar if isinstance(calendar, str) else None
    dates = decode_cf_times(raw, units, calendar)
    step: str | None = None
    if dates is not None:
        first, _, last = dates_text(dates)
        if length > 1:
            step = step_text(dates[1] - dates[0])
    else:
        first, last = str(raw[0].item()), str(raw[-1].item())
        if length > 1 and raw.dtype.kind in "iuf":
            step = str((raw[1] - raw[0]).item())
    return TimeReport(name, length, units, calendar, dates is not None, first, last, step)


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


def _planned(
    budget: int, anchors: AnchorSet, layouts: Mapping[str, VariableLayout], batch: int, held: int
) -> tuple[int, MemoryPlan] | None:
    try:
        return plan_loader_memory(
            budget,
            anchors,
            layouts,
            batch_size=batch,
            block_chunks=None,
            max_inflight=None,
            batches_held=held,
        )
    except ValueError:
        return None


def budget_that_fits(
    anchors: AnchorSet,
    layouts: Mapping[str, VariableLayout],
    *,
    batch_size: int,
    batches_held: int,
    above: int,
) -> int | None:
    """A budget above `above` that `build_loader`'s defaults fit in, and one byte less
    does not: found by bisection, since the default block grows with the budget (so the
    need is not a formula of the settings alone). Fitting is not quite monotone in the
    budget (where the default block gains a unit, a byte more can need more than it
    gives), so a somewhat smaller budget may fit too; None when nothing up to
    `LARGEST_BUDGET` fits.

    Args:
        anchors: the split's samples.
        layouts: the selected arrays.
        batch_size: samples per batch.
        batches_held: gathered batches alive at once.
        above: a budget known not to fit.
    """
    low, high = above, max(2 * above, 1)
    while _planned(high, anchors, layouts, batch_size, batches_held) is None:
        if high >= LARGEST_BUDGET:
            return None
        low, high = high, 2 * high
    while high - low > 1:  # low never fits, high does
        middle = (low + high) // 2
        fits = _planned(middle, anchors, layouts, batch_size, batches_held) is not None
        low, high = (low, middle) if fits else (middle, high)
    return high


def _loader_defaults(
    opened: ZarrSource,
    split: str,
    *,
    batch_size: int,
    memory_budget: int,
    device: str | None,
    mean_read_bytes: float | None,
    secrets: Iterable[str],
) -> LoaderDefaults:
    """What `build_loader(url, variables, split, batch_size=..., memory_budget=...)`
    would plan: the same anchors, device default, staging slots and memory plan."""
    if device is None:  # build_loader's default, without starting a CUDA context
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    held = PinToDeviceNode.staging_slots(default_prefetch(torch.device(device)))
    anchors = split_anchors(opened, split, None)
    samples = int(anchors.unit_sizes(anchors.units).sum())
    refused: str | None = None
    fitting: int | None = None
    argument: str | None = None
    block_chunks: int | None = None
    block_samples: int | None = None
    plan: MemoryPlan | None = None
    reads: int | None = None
    try:
        block_chunks, plan = plan_loader_memory(
            memory_budget,
            anchors,
            opened.layouts,
            batch_size=batch_size,
            block_chunks=None,
            max_inflight=None,
            batches_held=held,
        )
    except ValueError as err:
        refused = redact(str(err), secrets)
        fitting = budget_that_fits(
            anchors, opened.layouts, batch_size=batch_size, batches_held=held, above=memory_budget
        )
        if fitting is not None:  # a rounder value above the least may not fit: check it
            argument = size_argument(fitting)
            if _planned(parse_nbytes(argument), anchors, opened.layouts, batch_size, held) is None:
                argument = str(fitting)
    else:
        block_samples = anchors.block_rows_bound(block_chunks)
        if mean_read_bytes:
            reads = max(1, min(CEILING, int(plan.inflight_bytes // mean_read_bytes)))
    return LoaderDefaults(
        split=split,
        split_samples=samples,
        unit_steps=opened.geometry.unit_length,
        batch_size=batch_size,
        memory_budget=memory_budget,
        device=device,
        batches_held=held,
        decode_threads=default_decode_threads(),
        block_chunks=block_chunks,
        block_samples=block_samples,
        plan=plan,
        reads_in_flight=reads,
        refused=refused,
        fitting_budget=fitting,
        fitting_argument=argument,
    )
