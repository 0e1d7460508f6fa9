"""`build_loader`'s arguments checked once, before the store is opened: the first of its
three steps (settings, `builder.loader_plan`, `builder.wire_loader`).

Every argument whose meaning does not depend on the store is checked here, in the order
the loader has always checked them (so a wrong setting is refused with the same words),
and the ones left to the process are resolved: the device, the rank and the world size
(`builder.placement`). What only the store can judge is carried as given and checked by
the plan where the store is known: the manifest or date splits, the levels, the stride,
frequency and gap rule (they read the time coordinate), the spec's variables, the patch
size against the grid, the shuffle window (only the pool takes it), and the statistics
`normalise` names (the normalising node reads them against the channels).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from zarr.abc.store import Store

from insitubatch_nodes.builder.placement import (
    Placement,
    batch_device,
    decode_device,
    prefetch_for,
    process_rank,
)
from insitubatch_nodes.builder.time_selection import Duration
from insitubatch_nodes.core.area import Area
from insitubatch_nodes.core.cf_decoding import check_cast_dtype
from insitubatch_nodes.core.date_ranges import RangeLike
from insitubatch_nodes.core.forcing_names import ForcingChoice, check_forcings
from insitubatch_nodes.core.partition import check_rank
from insitubatch_nodes.core.patches import PatchSpec
from insitubatch_nodes.core.rank_shares import EVALUATION_DROP_LAST
from insitubatch_nodes.core.sample_spec import SampleSpec
from insitubatch_nodes.core.settings import as_bool, as_int, as_optional_int
from insitubatch_nodes.core.time_join import check_join_policy
from insitubatch_nodes.io.cache.chunk_cache import CacheSpec
from insitubatch_nodes.io.host.fork_guard import check_object_stores_usable
from insitubatch_nodes.io.joined_source import source_list
from insitubatch_nodes.io.metadata.levels import LevelsLike
from insitubatch_nodes.io.metadata.zarr_compat import resolve_pipeline
from insitubatch_nodes.io.reads.retry import RetryPolicy
from insitubatch_nodes.io.source_manifest import ManifestLike
from insitubatch_nodes.io.xarray_join import holds_datasets, joined_dataset_request
from insitubatch_nodes.io.xarray_source import dataset_request, is_dataset
from insitubatch_nodes.nodes.channel_stats import StatsLike

SHUFFLES = ("pool", "block")
DEFAULT_SHUFFLE = "pool"

PLACED = ("device", "decode", "device_prefetch", "rank", "world_size")
"""`build_loader`'s arguments that `LoaderSettings.placement` holds, resolved."""


@dataclass(frozen=True)
class LoaderSettings:
    """`build_loader`'s arguments, checked: ints and bools are Python's, within range. Each
    field means what `build_loader`'s argument of that name means (see there); where it
    differs, it says so.

    Args:
        source: a URL, a path or a zarr `Store`; for an xarray Dataset, its store's URL.
        variables: the arrays to load; the spec's variables when none were named, or the
            Dataset's.
        split: the split to read.
        batch_size: samples per batch.
        shuffle: `"pool"` or `"block"`.
        shuffle_window: as given; checked when the pool sizes by it.
        pool_ramp: how fast the pool fills at an epoch's start.
        pool_interleave: whether pool batches are interleaved.
        revisits: visits per unit and epoch.
        block_chunks: units per block, or None for the default.
        max_inflight: chunk reads under way at most, or None to follow the store.
        prefetch_blocks: blocks read ahead at least.
        memory_budget: bytes the loader holds at most, or None for the host's share.
        seed: the seed of every random order.
        placement: the rank, world size and devices, resolved from `device`, `decode`,
            `device_prefetch`, `rank` and `world_size` and this process.
        manifest: as given; checked against the store.
        splits: as given (or the Dataset's dates); cut on the store's time coordinate.
        stride: as given (or the Dataset's); checked with the time settings.
        frequency: as given; read against the store's time coordinate.
        max_gap: as given; read against the store's time coordinate.
        levels: as given (or the Dataset's); found in the store's level coordinate.
        drop_last: whether only full batches are yielded.
        storage_options: object-store client options.
        decode_threads: decode threads, or None for the host's share.
        zarr_pipeline: the codec pipeline for arrays zarr decodes (importable).
        retry: how transient read errors are retried, or None for the default.
        spec: the sample spec, or None for one step per sample.
        stack: whether each group's variables are stacked into one tensor.
        normalise: as given; the normalising node reads it against the channels.
        spatial_dims: trailing grid axes.
        patches: as given (or the Dataset's region); checked against the grid.
        read_across_epochs: whether the next epoch's first blocks are read early.
        cache: the chunk cache's spec, or None.
        evaluation: whether the split is read once, in order, for evaluation.
        all_ranks_state: whether `state_dict()` gathers every rank's state.
        canonical_partitions: C, or None for the default.
        decode_cf: whether values are decoded as `xr.open_zarr` decodes them (or the
            Dataset's: decoded unless it was opened with `mask_and_scale=False`).
        use_zarr_fill_value_as_mask: as `xr.open_zarr` takes it, or None by format.
        dtype: the float dtype's name batches are cast to, or None.
        fill_nan: the value NaN becomes after normalising, or None.
        forcings: the forcings, checked (`core.forcing_names.check_forcings`): names in the
            order given (empty for none), or, with a spec, names by group.
        area: the box of latitude and longitude every variable is cropped to, or None.
        join: how a list of stores is aligned on time (`core.time_join`).
    """

    source: str | Path | Store | Sequence[str | Path | Store]
    variables: Sequence[str] | None
    split: str
    batch_size: int
    shuffle: str
    shuffle_window: int | None
    pool_ramp: int
    pool_interleave: bool
    revisits: int
    block_chunks: int | None
    max_inflight: int | None
    prefetch_blocks: int
    memory_budget: int | None
    seed: int
    placement: Placement
    manifest: ManifestLike | None
    splits: Mapping[str, RangeLike] | None
    stride: int | None
    frequency: Duration | None
    max_gap: Duration | None
    levels: LevelsLike | None
    drop_last: bool
    storage_options: dict[str, Any] | Sequence[dict[str, Any] | None] | None
    decode_threads: int | None
    zarr_pipeline: str | None
    retry: RetryPolicy | None
    spec: SampleSpec | None
    stack: bool
    normalise: StatsLike | None
    spatial_dims: int
    patches: PatchSpec | None
    read_across_epochs: bool
    cache: CacheSpec | None
    evaluation: bool
    all_ranks_state: bool
    canonical_partitions: int | None
    decode_cf: bool = True
    use_zarr_fill_value_as_mask: bool | None = None
    dtype: str | None = None
    fill_nan: float | None = None
    forcings: ForcingChoice = ()
    area: Area | None = None
    join: str = "exact"


def check_shuffle(shuffle: str) -> str:
    """`shuffle` if it names an order the loader draws, else an error naming them.

    Args:
        shuffle: `"pool"` (the chunk-pool shuffle) or `"block"` (the block shuffle).
    """
    if shuffle not in SHUFFLES:
        raise ValueError(
            f"shuffle must be 'pool' (units mixed over a pool, the default) or 'block' "
            f"(samples mixed within blocks, as loaders before the pool drew), got {shuffle!r}"
        )
    return shuffle


def argument_names() -> set[str]:
    """The names `check_settings` takes: `build_loader`'s parameters but `host`."""
    return {f.name for f in fields(LoaderSettings)} - {"placement"} | set(PLACED)


def check_settings(arguments: Mapping[str, Any]) -> LoaderSettings:
    """`arguments` checked, in the order the loader has always checked them, or the error
    of the first that is refused (see the module).

    Args:
        arguments: `build_loader`'s arguments by name, every one but `host`, as the user
            gave them (defaults filled in).
    """
    names = set(arguments)
    if names != argument_names():
        raise TypeError(
            f"check_settings takes build_loader's arguments by name: missing "
            f"{sorted(argument_names() - names)}, unknown {sorted(names - argument_names())}"
        )
    # first: in a fork of a process that read through us, the store would hang and CUDA
    # cannot start (resolving the device asks it), so name the fork before either does
    check_object_stores_usable()
    given = dict(arguments)
    listed = source_list(given["source"])
    if is_dataset(given["source"]) or (listed is not None and holds_datasets(listed)):
        given.update(_dataset_settings(given, listed))
    check_shuffle(given["shuffle"])
    device = batch_device(given["device"])
    decode_on = decode_device(given["decode"], device)
    prefetch = as_optional_int("device_prefetch", given["device_prefetch"], minimum=0)
    prefetch = prefetch_for(device, prefetch)
    stack = as_bool("stack", given["stack"])
    spatial_dims = as_int("spatial_dims", given["spatial_dims"], minimum=0)
    rank, world_size, follow = process_rank(given["rank"], given["world_size"])
    revisits = as_int("revisits", given["revisits"], minimum=1)
    pool_ramp = as_int("pool_ramp", given["pool_ramp"], minimum=0)  # whatever the order
    pool_interleave = as_bool("pool_interleave", given["pool_interleave"])  # this too
    spec, variables = given["spec"], given["variables"]
    if spec is not None and variables is None:
        variables = spec.variables()
    # then what the graph's stages check of their own settings, in the order they are made
    seed = as_int("seed", given["seed"], minimum=0)
    rank = as_int("rank", rank)
    world_size = as_int("world_size", world_size)
    evaluation = as_bool("evaluation", given["evaluation"])
    check_rank(rank, world_size)
    partitions = as_optional_int("canonical_partitions", given["canonical_partitions"], minimum=1)
    batch_size = as_int("batch_size", given["batch_size"], minimum=1)
    drop_last = as_bool("drop_last", given["drop_last"])
    if evaluation and drop_last:
        raise ValueError(EVALUATION_DROP_LAST)
    cache = given["cache"]
    cache = CacheSpec.from_user(dict(cache) if isinstance(cache, Mapping) else cache)
    block_chunks = as_optional_int("block_chunks", given["block_chunks"], minimum=1)
    max_inflight = as_optional_int("max_inflight", given["max_inflight"], minimum=1)
    memory_budget = as_optional_int("memory_budget", given["memory_budget"], minimum=1)
    decode_threads = as_optional_int("decode_threads", given["decode_threads"], minimum=1)
    resolve_pipeline(given["zarr_pipeline"])
    prefetch_blocks = as_int("prefetch_blocks", given["prefetch_blocks"], minimum=1)
    read_across_epochs = as_bool("read_across_epochs", given["read_across_epochs"])
    all_ranks_state = as_bool("all_ranks_state", given["all_ranks_state"])
    decode_cf = as_bool("decode_cf", given["decode_cf"])
    fill_mask = given["use_zarr_fill_value_as_mask"]
    if fill_mask is not None:
        fill_mask = as_bool("use_zarr_fill_value_as_mask", fill_mask)
    dtype = check_cast_dtype(_dtype_name(given["dtype"]))
    fill_nan = _optional_float("fill_nan", given["fill_nan"])
    forcings = check_forcings(given["forcings"], None if spec is None else tuple(spec.groups))
    area = None if given["area"] is None else Area.parse(given["area"])
    join = check_join_policy(given["join"])
    stores = source_list(given["source"])
    if stores is not None and len(stores) > 1:
        check_join_sources(stores, decode_on)
    if fill_nan is not None and given["normalise"] is None:
        raise ValueError(
            f"fill_nan={fill_nan!r} replaces NaN after normalising, and normalise= is not "
            f"given; pass normalise= (insitubatch stats makes its file), or replace NaN in "
            f"your training step"
        )
    return LoaderSettings(
        source=given["source"],
        variables=variables,
        split=given["split"],
        batch_size=batch_size,
        shuffle=given["shuffle"],
        shuffle_window=given["shuffle_window"],
        pool_ramp=pool_ramp,
        pool_interleave=pool_interleave,
        revisits=revisits,
        block_chunks=block_chunks,
        max_inflight=max_inflight,
        prefetch_blocks=prefetch_blocks,
        memory_budget=memory_budget,
        seed=seed,
        placement=Placement(rank, world_size, follow, device, decode_on, prefetch),
        manifest=given["manifest"],
        splits=given["splits"],
        stride=given["stride"],
        frequency=given["frequency"],
        max_gap=given["max_gap"],
        levels=given["levels"],
        drop_last=drop_last,
        storage_options=given["storage_options"],
        decode_threads=decode_threads,
        zarr_pipeline=given["zarr_pipeline"],
        retry=given["retry"],
        spec=spec,
        stack=stack,
        normalise=given["normalise"],
        spatial_dims=spatial_dims,
        patches=given["patches"],
        read_across_epochs=read_across_epochs,
        cache=cache,
        evaluation=evaluation,
        all_ranks_state=all_ranks_state,
        canonical_partitions=partitions,
        decode_cf=decode_cf,
        use_zarr_fill_value_as_mask=fill_mask,
        dtype=dtype,
        fill_nan=fill_nan,
        forcings=forcings,
        area=area,
        join=join,
    )


def _dataset_settings(given: Mapping[str, Any], listed: list[Any] | None) -> dict[str, Any]:
    """The settings a Dataset (or a list of them, joined) selects, in place of `source`:
    the store (or the stores and the join they are read under), the variables, the time
    selection as a split, levels, the crop and the decoding; a setting given both ways is
    refused (`DatasetRequest.settings`)."""
    if listed is None:
        request = dataset_request(
            given["source"],
            storage_options=given["storage_options"],
            spatial_dims=given["spatial_dims"],
        )
        where: dict[str, Any] = {"source": request.url}
    else:
        joined = joined_dataset_request(
            listed,
            storage_options=given["storage_options"],
            spatial_dims=given["spatial_dims"],
            join=given["join"],
        )
        request = joined.request
        where = {
            "source": joined.urls,
            "storage_options": joined.storage_options,
            "join": joined.join,
        }
    selected = ("variables", "splits", "manifest", "levels", "stride", "frequency", "patches")
    chosen = request.settings(given["split"], {k: given[k] for k in selected})
    if given["area"] is not None and chosen.get("patches") is not None:
        raise ValueError(
            "the Dataset selects part of the grid and area= is given too: select the "
            "region either on the Dataset (.isel/.sel) or with area=, not both"
        )
    return chosen | where | request.decoding_settings(given["decode_cf"])


def check_join_sources(stores: Sequence[Any], decode_on: torch.device | None) -> None:
    """Refuse what a join of several stores does not take yet: decoding on a device (the
    device reader reads one store).

    Args:
        stores: the stores of `source=`'s list (two or more).
        decode_on: the device chunks would be decoded on, or None for the CPU.
    """
    if decode_on is not None:
        raise ValueError(
            f"decode={decode_on.type!r} decodes chunks on the device, which a join of several "
            f"stores does not do yet; pass decode='cpu' (the default)"
        )


def _dtype_name(dtype: Any) -> Any:
    """A torch or numpy dtype as its name (`torch.float32` -> "float32"); others as given,
    for `check_cast_dtype` to judge."""
    if isinstance(dtype, torch.dtype):
        return str(dtype).removeprefix("torch.")
    if isinstance(dtype, np.dtype) or (isinstance(dtype, type) and issubclass(dtype, np.generic)):
        return str(np.dtype(dtype))
    return dtype


def _optional_float(name: str, value: Any) -> float | None:
    """`value` as a float, or None; an error naming `name` for anything but a number."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a number or None, got {value!r}")
    return float(value)
