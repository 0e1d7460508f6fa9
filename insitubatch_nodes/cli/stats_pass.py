"""One streaming pass over a split that yields its per-channel mean and std.

The pass is the library's own loader over the split (spec-less, one rank, on the host),
so it reads each chunk of the split once, concurrently, and holds no more memory than
training does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zarr.abc.store import Store

from insitubatch_nodes.builder.build_loader import build_loader
from insitubatch_nodes.core.area import Area
from insitubatch_nodes.core.channels import DEFAULT_SPATIAL_DIMS, channel_names
from insitubatch_nodes.core.manifest import units_to_ranges
from insitubatch_nodes.core.moments import RunningMoments
from insitubatch_nodes.core.settings import as_int
from insitubatch_nodes.io.joined_source import open_source
from insitubatch_nodes.io.metadata.levels import LevelsLike
from insitubatch_nodes.io.source_manifest import ManifestLike
from insitubatch_nodes.nodes.channel_stats import ChannelStats


def compute_stats(
    source: str | Path | Store | Sequence[str | Path | Store],
    variables: Sequence[str] | None = None,
    *,
    split: str = "train",
    manifest: ManifestLike | None = None,
    spatial_dims: int = DEFAULT_SPATIAL_DIMS,
    storage_options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
    batch_size: int = 8,
    block_chunks: int = 2,
    memory_budget: int = 1 << 30,
    levels: LevelsLike | None = None,
    decode_cf: bool = True,
    use_zarr_fill_value_as_mask: bool | None = None,
    area: Sequence[float] | None = None,
    join: str = "exact",
) -> ChannelStats:
    """Mean and std per channel over every step of `split`, in one pass over its chunks,
    of the values the loader yields: decoded as `xr.open_zarr` decodes them, NaN skipped
    and counted (`core.moments`). A static field (`core.static_fields`) is one channel
    whose statistics are those of its grid, read once (every sample holds the same); a
    constant one has std 0, which `NormaliseNode` divides by 1 (its values become 0). The
    decoding is recorded, so a loader that decodes otherwise refuses to normalise with
    them.

    The batch and block sizes only set how much is held at once (`memory_budget`), not the
    result beyond float64 rounding. With `levels` (as `build_loader` takes them) the
    channels are the levels kept, one statistic per level (`temperature_500`).

    Args:
        source: the Zarr group: a URL or path, or an open zarr `Store`; or a list of
            them, joined as `build_loader` joins them (statistics of the joined steps).
        variables: the arrays (default: every array of 2 or more dimensions).
        split: the split to compute over.
        manifest: the split manifest (`io.source_manifest.load_manifest`'s forms), or None
            for the default.
        spatial_dims: the trailing grid axes (the axes before them are channels).
        storage_options: object-store client options (obstore's).
        batch_size: samples per batch of the pass.
        block_chunks: units read together.
        memory_budget: bytes the pass holds at most.
        levels: level values to keep, as `build_loader` takes them.
        decode_cf: statistics of decoded values (the default), or of stored ones (False),
            as the loader they normalise for yields.
        use_zarr_fill_value_as_mask: as `build_loader` takes it.
        area: `(north, west, south, east)`, as `build_loader` takes it: statistics of the
            box's grid points only (a regional model's), or None for the whole grid.
        join: how a list of stores is aligned on time, as `build_loader` takes it.
    """
    box = None if area is None else Area.parse(area)
    spatial_dims = as_int("spatial_dims", spatial_dims, minimum=0)
    opened = open_source(
        source,
        variables,
        manifest=manifest,
        storage_options=storage_options,
        levels=levels,
        spatial_dims=spatial_dims,
        decode_cf=decode_cf,
        use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
        area=box,
        join=join,
    )
    channels = {v: channel_names(v, layout, spatial_dims) for v, layout in opened.layouts.items()}
    moments = {v: RunningMoments(len(names)) for v, names in channels.items()}
    for name, values in opened.read_statics().items():  # the same at every step: once
        channels[name] = [name]
        moments[name] = RunningMoments(1)
        moments[name].add(values.reshape(1, 1, -1))
    fields = list(opened.layouts)
    joined = bool(opened.parts)  # a join is opened again from its stores and options
    loader = build_loader(
        source if joined else opened.store,
        fields,
        split,
        batch_size=batch_size,
        block_chunks=block_chunks,
        memory_budget=memory_budget,
        rank=0,
        world_size=1,
        device="cpu",
        manifest=opened.manifest,
        levels=levels,
        spatial_dims=spatial_dims,
        decode_cf=decode_cf,
        use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask,
        area=box,
        storage_options=storage_options if joined else None,
        join=join,
    )
    for batch in loader:
        for variable in fields:
            running = moments[variable]
            values = batch[variable].numpy()
            running.add(values.reshape(values.shape[0], running.channels, -1))
    return ChannelStats(
        split=split,
        split_units=units_to_ranges(opened.split_units(split)),
        unit_length=opened.geometry.unit_length,
        spatial_dims=spatial_dims,
        channels=channels,
        mean={v: m.means.tolist() for v, m in moments.items()},
        std={v: m.std.tolist() for v, m in moments.items()},
        count={v: m.count for v, m in moments.items()},
        nan_count={v: m.nan_count.tolist() for v, m in moments.items()},
        decoding=opened.decoding_records(),
    )
