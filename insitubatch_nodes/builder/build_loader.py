"""build_loader: the default graph in one call, made in three steps: the settings checked
(`builder.loader_settings`), one plan of every decision (`builder.loader_plan`), and the
nodes wired from it (`builder.wire_loader`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from zarr.abc.store import Store

from insitubatch_nodes.builder.loader_plan import plan_loader
from insitubatch_nodes.builder.loader_settings import DEFAULT_SHUFFLE, check_settings
from insitubatch_nodes.builder.time_selection import Duration
from insitubatch_nodes.builder.wire_loader import wire_loader
from insitubatch_nodes.core.channels import DEFAULT_SPATIAL_DIMS
from insitubatch_nodes.core.date_ranges import RangeLike
from insitubatch_nodes.core.patches import PatchSpec
from insitubatch_nodes.core.pool_order import POOL_RAMP
from insitubatch_nodes.core.sample_spec import SampleSpec
from insitubatch_nodes.io.cache.chunk_cache import CacheSpec
from insitubatch_nodes.io.host.host_resources import HostResources
from insitubatch_nodes.io.metadata.levels import LevelsLike
from insitubatch_nodes.io.reads.retry import RetryPolicy
from insitubatch_nodes.io.source_manifest import ManifestLike
from insitubatch_nodes.loader.loader import Loader
from insitubatch_nodes.nodes.channel_stats import StatsLike

log = logging.getLogger("insitubatch_nodes.builder")  # the name the docs give


def build_loader(
    source: str | Path | Store | Any,
    variables: Sequence[str] | None = None,
    split: str = "train",
    *,
    batch_size: int = 32,
    shuffle: str = DEFAULT_SHUFFLE,
    shuffle_window: int | None = None,
    pool_ramp: int = POOL_RAMP,
    pool_interleave: bool = True,
    revisits: int = 1,
    block_chunks: int | None = None,
    max_inflight: int | None = None,
    prefetch_blocks: int = 2,
    memory_budget: int | None = None,
    seed: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    device: str | torch.device | None = None,
    manifest: ManifestLike | None = None,
    splits: Mapping[str, RangeLike] | None = None,
    stride: int | None = None,
    frequency: Duration | None = None,
    max_gap: Duration | None = None,
    levels: LevelsLike | None = None,
    drop_last: bool = False,
    storage_options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
    decode_threads: int | None = None,
    zarr_pipeline: str | None = None,
    retry: RetryPolicy | None = None,
    spec: SampleSpec | None = None,
    stack: bool = False,
    normalise: StatsLike | None = None,
    spatial_dims: int = DEFAULT_SPATIAL_DIMS,
    patches: PatchSpec | None = None,
    device_prefetch: int | None = None,
    decode: str = "cpu",
    read_across_epochs: bool = False,
    cache: CacheSpec | Mapping[str, Any] | None = None,
    evaluation: bool = False,
    all_ranks_state: bool = False,
    canonical_partitions: int | None = None,
    decode_cf: bool = True,
    use_zarr_fill_value_as_mask: bool | None = None,
    dtype: torch.dtype | str | None = None,
    fill_nan: float | None = None,
    forcings: Sequence[str] | Mapping[str, Sequence[str]] | None = None,
    area: Sequence[float] | None = None,
    join: str = "exact",
    host: HostResources | None = None,
) -> Loader[dict[str, torch.Tensor]]:
    """Shuffled, split-aware, resumable batches from a Zarr group.

    Each batch is `{variable: tensor (batch, *sample_shape), "sample_index": int64}`;
    every rank yields the same number of batches per epoch, and `loader.state_dict()`
    resumes exactly (refused, by name, on other data or another graph). What the settings
    left out were chosen as, and why, is logged once (logger `insitubatch_nodes.builder`,
    INFO): the budget and decode threads follow the host, the block size never does.

    Args:
        source: the Zarr group: a URL (`file://`, a path, `memory://NAME`, `s3://`,
            `gs://`, `az://`, `http(s)://`) or an open zarr `Store`; or an xarray
            `Dataset` opened from one (`xr.open_zarr(url)`, after `.sel`/`.isel` and a
            variable subset): its store is read in place with its selection as settings
            (`io/xarray_source.py`): its variables, its time selection as split `split`
            (`splits=`, and `stride=` for every k-th step), its levels as `levels=`; what
            stored chunks cannot give (computed variables, part of the grid) is refused.
            Or a list of URLs, paths or `Store`s read as one (a *join*, see `join`):
            variables are looked up by name across them (a name in two stores is
            refused), each store is read in place with its own chunking, codecs and
            `storage_options`, and batches equal `xr.merge([xr.open_zarr(u) for u in
            urls], join=join)` at each `sample_index` of the joined time axis. Or a list
            of such Datasets (`io/xarray_join.py`): each selection applies to its own
            store, and batches equal `xr.merge(datasets, join=join)`.
        variables: the arrays to load (default: every array of 2 or more dimensions with
            the time dimension, or the spec's variables); they must share axis 0, the
            sample axis. One without the store's time dimension (by dimension names) is a
            static field: read once, decoded, and in every batch as `(batch, *grid)` under
            its name (`core.static_fields`); it must lie on the fields' grid. The default
            leaves statics out (the log names them).
        split: the split to read (`"train"`, `"val"`, `"test"`, a manifest's own, or
            `"all"`).
        batch_size: samples per batch.
        shuffle: the epoch order. `"pool"` (the default): units enter a pool of P in the
            epoch's order and each batch draws uniformly over every sample left in the
            pool, so a batch mixes about as many units as a global shuffle over P units
            would (`core.pool_order`); an epoch's first batch waits only for its own units,
            and the pool fills to P as batches are drawn (`pool_ramp`). `"block"`:
            samples mixed only within blocks of `block_chunks` units, the order of
            loaders before the pool (their states resume with it).
            A state says which order (and version) made it, and the other refuses it by
            name. Evaluation loaders draw in order whichever is named.
        shuffle_window: bytes the pool's units may hold (it sets P, and P is in the
            state); by default 1 GiB, or, under a smaller `memory_budget` given, half of
            it, shrunk further to what the budget holds beside the batches, reads in
            flight and one block read ahead: never the host's memory, since P decides the
            batches. Counted in the budget.
        pool_ramp: how fast the pool fills at an epoch's start: before batch b it holds
            (b + 1) * pool_ramp batches' samples, until it holds P units. 2 (the default):
            the first batch waits for two batches' samples (at batch 32, what the first
            default block holds anyway), not for P units, and until the pool is full,
            reads run at three times the draw rate; larger values mix the first batches
            better and wait longer for them; 0 fills the pool before the first batch (the
            order of releases before the ramp, whose states resume only with 0 and
            `pool_interleave=False`). In the state.
        pool_interleave: yield each pool batch's samples in a seeded permutation (the
            default), so that a contiguous slice of a batch (a micro-batch for gradient
            accumulation, a DataParallel replica's share) is as mixed as the whole batch;
            False keeps them grouped by unit, the order of releases before it, whose states
            resume only with False. In the state.
        revisits: visits per unit and epoch: each unit is read `revisits` times, each
            visit keeping only its equal run of the unit's steps (a chunk decoded whole,
            the rest dropped), so the pool's memory holds `revisits` times as many of the
            store's units and batches mix better, for `revisits` times the reads (see
            `read_amplification`/`chunk_amplification` in `loader.stats()`). Every sample
            is still drawn once per epoch. Must divide the unit length; recorded in the
            state (a state of another value is refused).
        block_chunks: units read together (with `shuffle="block"`, also shuffled
            together: larger blocks shuffle better and hold more memory); by default at
            least 64 samples and 8 chunks, within an eighth of a fixed 1 GiB, or of a
            smaller `memory_budget` given (`core.memory_bound.default_block_chunks`):
            never of the host's memory, since the block decides the batches.
        max_inflight: chunk reads under way at once at most; by default as many as the
            store shows it takes (its delivered rate times its round trip, measured as
            reads complete, `core.inflight_target`), within an eighth of the budget and
            1024 reads. Reading ahead runs until that many are pending.
        prefetch_blocks: blocks read ahead at least.
        memory_budget: bytes the loader holds at most: the shuffle window, the batches
            being gathered and the reads in flight come first, the rest caps the blocks
            read ahead (`core.memory_bound`); too small a budget is refused with the
            numbers. By default half of this rank's share of the host's available
            memory (shared by `LOCAL_WORLD_SIZE` ranks), raised to what the settings need
            if this rank's share holds that, else refused with the numbers
            (`builder.loader_choices`).
        seed: the seed of every random order (with the epoch, it fixes every batch).
        rank: this process's rank (default: torch.distributed, else `RANK`, else 0; with
            neither `rank` nor `world_size` given and no process group yet, one started
            before the loader is first used is followed, as Lightning's DDP starts it).
        world_size: the number of ranks (default: torch.distributed, else `WORLD_SIZE`,
            else 1; followed like `rank`).
        device: where batches go (default: the current CUDA device if there is one, else
            the CPU); `sample_index` stays on the host.
        manifest: the split manifest (a `SplitManifest`, its dict, its JSON text or the
            path of its file); default: contiguous train/val/test at 0.8/0.1/0.1.
        splits: splits by dates instead of a manifest: split name -> an inclusive
            `(first, last)` pair of dates or one date for its whole period, e.g.
            `{"train": ("1979", "2015"), "val": "2016", "test": ("2017", "2018")}`, found
            in the store's time coordinate (`make_date_manifest`). Exact to the step: a
            chunk across a boundary is read by both splits, each using its own anchors,
            and no window or lead crosses a boundary.
        stride: keep every `stride`-th step (counted from the store's first) as an
            anchor, and count the spec's windows and leads in strides (`window(steps=2)`
            at a stride of 6 is t-6, t); `sample_index` still holds stored steps. The
            chunks read are those the anchors need. Windows, leads and strides count
            steps: where the time coordinate has a gap, they span it (see `max_gap`).
            Any stride works on any chunking: one shorter than a unit that does not
            divide it (3 on chunks of 4) is dealt in units of their least common multiple
            (12 steps), so every unit holds as many anchors; the log says which units
            (`core.stride_units`), and the split's steps stay those without a stride.
        frequency: instead of `stride`, a duration ("6h", a timedelta): the anchors are
            the steps at the store's first date plus a whole number of it, and windows
            and leads count it in steps of the time coordinate (which it must be a whole
            number of).
        max_gap: a duration ("1h"): anchors whose window or leads span two neighbouring
            dates further apart are not used (gaps in the time coordinate).
        levels: pressure levels by value, as `ds.sel(level=[500, 850])` picks them: one
            list for every variable with a level axis (the axis between time and the grid
            with a coordinate), or variable -> list. Batches hold them in the order
            given, as `ds.sel` does, whatever order the store keeps (a level given twice
            comes twice); only those levels are kept from each chunk decoded (chunks
            holding none are not read), and their channels are named by value
            (`temperature_500`), in that order.
        drop_last: yield only full batches (no padding repeats).
        storage_options: object-store client options (obstore's), e.g. credentials; for
            a join, one dict for every store or a list of one dict (or None) per store.
        decode_threads: threads that decode chunks (default: this rank's share of the
            cores it may run on, `cores // LOCAL_WORLD_SIZE`, at least 1 and at most 32).
        zarr_pipeline: `"zarrs"` to let the Rust pipeline decode the arrays zarr must
            decode itself (filters, F order); common layouts are decoded by the library.
        retry: how reads that fail transiently (HTTP 5xx, timeouts, dropped connections)
            are retried; the default `RetryPolicy()` tries each read 5 times.
        spec: a `SampleSpec`: each sample is an anchor step t carrying, per group, the
            steps t+offset of its variables (`{"group/variable": (batch, steps,
            *sample_shape)}`); anchors whose window would leave the split are not used.
        stack: put each group's variables (a spec-less loader's: key `"fields"`) into
            one `(batch, [steps,] channels, *grid)` tensor: variables and their levels,
            then static fields (repeated along the steps); `loader.channels` names them
            in order.
        normalise: a `ChannelStats` (or its JSON file, see `insitubatch stats`): `(x -
            mean) / std` per channel after the device copy, as float32.
        spatial_dims: how many trailing axes are the grid (the axes between the sample
            axis and the grid become channels).
        patches: a `PatchSpec`: random crops of the last axes (a pure function of seed,
            epoch and anchor), `mode="tiles"` for evaluation, or `mode="region"` with
            `origin=` for one fixed crop (what a Dataset's spatial slice becomes); only
            the grid chunks the crops touch are read; batches carry `"patch_origin"`.
        device_prefetch: batches gathered (and on CUDA copied) ahead by a producer
            thread while the consumer's step runs (default 2 on CUDA, 0 on the CPU).
        decode: `"gpu"` decodes zstd and uncompressed chunks on the GPU (the `gpu`
            extra); arrays it cannot decode are decoded on the CPU, and the log says why.
        read_across_epochs: read the next epoch's first blocks while the last batches of
            this one are drawn; threads and those blocks stay between epochs until the
            next one, `loader.close()` (or `with loader:`), or garbage collection.
        cache: keep the chunks' stored bytes on local disk and read them from there in
            later epochs: a `CacheSpec(folder, max_bytes, read_only=False)` or a dict of
            its fields (`io.cache.chunk_cache`). Entries are keyed by the store, the array's
            metadata, the chunk and the object's version, and verified when read; the
            folder may be shared by the ranks and runs of one host. Off by default.
        evaluation: for validation and test: the split in a fixed order (the same every
            epoch), every sample exactly once across the ranks, no padding, so the ranks'
            last batches and batch counts may differ (`len(loader)` says each rank's);
            `drop_last` must stay False.
        all_ranks_state: `state_dict()` holds every rank's state, gathered over
            torch.distributed (every rank must call it at once), so that the checkpoint
            Lightning or accelerate writes (rank 0's) resumes every rank.
        canonical_partitions: C, the partitions a training epoch's units are dealt to
            before the ranks take them (`core.canonical_partitions`); default the largest multiple
            of 48 not above the split's units (one per unit below 48), so that the common
            GPU counts divide it. Recorded in the state; a run keeps it when resumed on
            another number of ranks.
        decode_cf: yield the values `xr.open_zarr(url)` shows (the default): stored values
            equal to `_FillValue` or `missing_value` are NaN, packed ones unpacked
            (`* scale_factor + add_offset`), `_Unsigned` honoured, in xarray's dtype
            (float64 for packed Zarr). Blocks keep the stored dtype; batches are decoded
            after the device copy (before stacking, when stacking). False yields stored
            values, as `xr.open_zarr(url, mask_and_scale=False)`. In the state.
        use_zarr_fill_value_as_mask: whether a Zarr array's `fill_value` is its
            `_FillValue`, as `xr.open_zarr` takes it: by default True for Zarr v2 (a
            `fill_value` of 0 then masks every stored 0, which the log warns about) and
            False for v3, whose `_FillValue` attribute is the mask.
        dtype: cast batches to this float dtype (`torch.float32`, `torch.bfloat16`, or a
            name): decoded in xarray's dtype first, then cast, so a batch equals
            `xr.open_zarr(url)[v].astype(dtype)`. Default: the decoded dtype. In the state.
        fill_nan: with `normalise`, the value NaN (masked values) becomes after
            normalising, e.g. 0.0, since most models cannot take NaN.
        forcings: fields computed from each sample's valid time and the grid's latitude
            and longitude, by name (`core.forcing_names.FORCINGS`): `cos_solar_zenith_angle`,
            `toa_incident_solar_radiation` (J m-2 over the hour ending at the valid time),
            `year_progress_sin`/`_cos`, `day_progress_sin`/`_cos` (as GraphCast's),
            `cos_latitude`, `sin_longitude`/`cos_longitude`. Each is a batch key (a spec's
            `group/name`) of shape `(batch, [steps,] *grid)` (the patch's grid with
            patches, the box's with `area`), float32, computed where batches go (docs:
            Model inputs); with `stack=True`, channels of every stacked tensor after its
            variables. With a spec, every group takes a list's forcings; a mapping of
            group names to lists (`{"inputs": [...]}`) gives them to those groups only
            (a model predicts no forcing: keep them out of its targets). `normalise`
            leaves them as they are. The time coordinate and the grid's coordinates are
            read once, when the loader is built. In the state.
        area: `(north, west, south, east)` in degrees, as anemoi and the CDS write it:
            every variable keeps only the grid points with `south <= lat <= north` and
            `(lon - west) mod 360 <= (east - west) mod 360` (edges inclusive within 1e-6
            degrees; `east - west >= 360` is the whole circle), found in its latitude and
            longitude coordinates (stored in [0, 360) or [-180, 180)). Latitudes keep the
            stored order; longitudes run eastward from `west`, so a box across the seam or
            the dateline comes out in one piece. Only the chunks the box touches are read.
            `loader.area` holds the batch's latitudes and longitudes. In the state.
        join: how the stores of a list are aligned on time, by value: `"exact"` (every
            store with a time axis has the same dates, else refused naming the first
            that differ) or `"inner"` (the dates every such store holds, as
            `xr.merge(join="inner")` keeps them: a date one store lacks is left out of
            every store, the others read on both sides of it). A store of static fields only
            joins by grid alone; grids must agree within 1e-6 degrees. Ignored for one
            store.
        host: the host's available memory, cores and ranks the defaults follow (default
            `HostResources.read()`, once, now).
    """
    arguments = dict(locals())  # every parameter, by name: nothing else is bound yet
    del arguments["host"]  # what the defaults follow, not a setting
    plan = plan_loader(check_settings(arguments), host=host)
    loader = wire_loader(plan)
    where, split = plan.source.where, plan.settings.split
    log.info("build_loader on %s, split %r: %s", where, split, plan.summary())
    return loader
