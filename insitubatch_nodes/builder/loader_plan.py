"""A loader's plan: every decision `build_loader` makes, as one value, before any node
exists. The second of its three steps (`builder.loader_settings`, then this, then
`builder.wire_loader`).

`plan_loader` opens the source, finds the split's anchors on the loader's unit grid
(`builder.split_anchors.plan_split`), counts every rank's share and refuses a batch no
rank could fill (`core.rank_shares`), and chooses the memory budget, decode threads, block
size and pool size with why (`builder.loader_choices`, the function `insitubatch
inspect` reports from). Wiring then only constructs what the plan says, so a plan can be
read, compared or logged before anything runs, and the checks that the data, not a node,
decides are made once, here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from insitubatch_nodes.builder.batch_layouts import (
    batch_channel_order,
    decoded_layouts,
    field_decodings,
    kept_static_layouts,
    stacked_channels,
)
from insitubatch_nodes.builder.forcing_memory import with_forcings
from insitubatch_nodes.builder.forcing_plan import plan_forcings
from insitubatch_nodes.builder.loader_choices import LoaderChoices, choose_loader_settings
from insitubatch_nodes.builder.loader_settings import LoaderSettings
from insitubatch_nodes.builder.placement import Placement
from insitubatch_nodes.builder.split_anchors import SplitPlan, plan_split
from insitubatch_nodes.builder.static_plan import StaticPlan, plan_statics
from insitubatch_nodes.core.cf_decoding import CFDecoding, promoted_dtype, stored_values
from insitubatch_nodes.core.channels import stacked_groups
from insitubatch_nodes.core.fingerprint import CHANNELS_KEY, FORCINGS_KEY
from insitubatch_nodes.core.forcings import ForcingPlan
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.rank_shares import RankShares, check_full_batch, rank_shares
from insitubatch_nodes.core.static_fields import fields_spec
from insitubatch_nodes.io.cache.chunk_cache import CacheSpec
from insitubatch_nodes.io.host.host_resources import HostResources
from insitubatch_nodes.io.joined_source import open_source
from insitubatch_nodes.io.reads.object_versions import object_versions
from insitubatch_nodes.io.reads.retry import RetryPolicy
from insitubatch_nodes.io.zarr_source import ZarrSource
from insitubatch_nodes.nodes.channel_stats import StatsLike, load_stats

log = logging.getLogger("insitubatch_nodes.builder")  # the name the docs give

PINNED_BY_GATHER = "gather"
PINNED_BY_STACK = "stack"


@dataclass(frozen=True)
class LoaderPlan:
    """What a loader is to be, decided: the wiring (`builder.wire_loader`) reads it and
    decides nothing. Plans compare by their decisions; the opened source and the split's
    anchors compare through the fingerprint, which digests them.

    Args:
        settings: the checked settings, the placement (rank, world size, devices) among
            them.
        source: the opened source: its store, arrays, manifest (not compared).
        samples: the split's unit grid, time selection and anchors (not compared).
        fingerprint: what the loader reads, as plain data (`ZarrSource.fingerprint` of
            the split and its anchors), kept in the state so that other data refuses it.
        shares: every rank's share of the split, as this rank sees it, and the canonical
            partition count C.
        choices: the memory budget, decode threads, block size, shuffle and pool size,
            each with why, and how the budget splits (`LoaderChoices.plan`).
        pinned_by: which stage writes host batches page-locked for the copy to a GPU:
            `"gather"`, `"stack"` (the stage whose output crosses), or None.
        mixing_measured: whether batches are measured against a uniform shuffle of the
            split (`Loader.stats()`'s mixing); evaluation's fixed order is not.
        channel_order: each batch array's channel names, for `normalise`, else None.
        decodings: each gathered batch key's decoding (`ZarrSource.decodings`, by the key
            of the field its variable fills), for `CFDecodeNode`.
        statics: the static fields: where each appears, the dtype it is kept in, and
            what it holds of the budget (`builder.static_plan`).
        channels: with `stack=True`, each stacked tensor's channel names in order (what
            `Loader.channels` gives), else None.
        forcings: what the forcings are computed from (`builder.forcing_plan`), or None
            without forcings (not compared: the fingerprint records their names).
    """

    settings: LoaderSettings
    source: ZarrSource = field(compare=False)
    samples: SplitPlan = field(compare=False)
    fingerprint: dict[str, Any]
    shares: RankShares
    choices: LoaderChoices
    pinned_by: str | None
    mixing_measured: bool
    channel_order: dict[str, list[str]] | None
    decodings: dict[str, CFDecoding] = field(default_factory=dict)
    statics: StaticPlan = field(default_factory=StaticPlan)
    channels: dict[str, list[str]] | None = None
    forcings: ForcingPlan | None = field(default=None, compare=False)

    @property
    def placement(self) -> Placement:
        """Where the loader's work runs (`settings.placement`)."""
        return self.settings.placement

    def cast_decodings(self) -> dict[str, CFDecoding]:
        """Each batch field's values as they are (decoded already), in the dtype the
        batch holds them in (a stack's: the widest of its variables'): what a cast after
        the decoding starts from."""
        if self.settings.stack:
            groups = stacked_groups(self.source.layouts, self.samples.time.spec)
            for placement in self.statics.placements:  # stacked beside them, decoded too
                if placement.group is not None:
                    groups[placement.group] = [*groups[placement.group], placement.name]
            return {
                key: stored_values(promoted_dtype(self.decodings_of(variables)))
                for key, variables in groups.items()
            }
        return {key: stored_values(d.decoded_dtype) for key, d in self.decodings.items()}

    def decoded_layouts(self) -> dict[str, VariableLayout]:
        """The source's layouts with the dtype of their decoded values: what stacking
        sees (decoding comes before it)."""
        return decoded_layouts(self.source)

    def static_layouts(self) -> dict[str, VariableLayout]:
        """The static fields' layouts with the dtype their values are kept in: what
        stacking sees of them."""
        return kept_static_layouts(self.source, self.statics)

    def decodings_of(self, variables: list[str]) -> list[str]:
        """The decoded dtypes of `variables`, in order.

        Args:
            variables: variable names of the source.
        """
        return [self.source.decodings[v].decoded_dtype for v in variables]

    @property
    def unit_grid(self) -> dict[str, int]:
        """The unit grid as plain ints, recorded in the state so that a state made on
        another grid is refused by name."""
        return {"unit_steps": self.samples.grid.unit_length, "revisits": self.settings.revisits}

    def summary(self) -> str:
        """One line for the log: each choice with its reason (`LoaderChoices.summary`),
        and with a stride or frequency, the units it is dealt in and why."""
        text = self.choices.summary()
        if self.samples.time.steps > 1:
            text += f"; stride: {self.samples.units.text()}"
        return text


def plan_loader(settings: LoaderSettings, host: HostResources | None = None) -> LoaderPlan:
    """The plan of a loader with `settings` on `host`, or the first refusal of the data:
    a store, variables, split or manifest that cannot be read, a time setting or spec the
    split keeps no anchor under, fewer units than ranks, no full batch, a budget too small
    (in the order the loader has always checked them).

    Args:
        settings: the checked settings (`builder.loader_settings.check_settings`).
        host: the host's available memory, cores and ranks the defaults follow (default
            `HostResources.read()`, when the budget is chosen).
    """
    placement = settings.placement
    opened = open_source(
        settings.source,
        settings.variables,
        manifest=settings.manifest,
        storage_options=settings.storage_options,
        splits=settings.splits,
        levels=settings.levels,
        spatial_dims=settings.spatial_dims,
        decode_cf=settings.decode_cf,
        use_zarr_fill_value_as_mask=settings.use_zarr_fill_value_as_mask,
        area=settings.area,
        join=settings.join,
    )
    for warning in opened.decoding_warnings:
        log.warning("%s", warning)
    if opened.statics_left_out:
        log.info(
            "static fields %s (no time dimension) left out of the default choice of "
            "variables; name them in variables= (or a spec's group) to give them to every "
            "sample",
            list(opened.statics_left_out),
        )
    samples = plan_split(
        opened,
        settings.split,
        fields_spec(settings.spec, list(opened.statics)),
        revisits=settings.revisits,
        stride=settings.stride,
        frequency=settings.frequency,
        max_gap=settings.max_gap,
        patches=settings.patches,
    )
    anchors, spec = samples.anchors, samples.time.spec
    # statics join host batches (copies there count) before a host stack, or unstacked
    # when batches stay on the CPU; else they join on the device
    on_host = placement.decode_on is None if settings.stack else placement.device.type == "cpu"
    statics = plan_statics(
        opened,
        settings.spec,
        cast=settings.dtype,
        stacked_on_host=settings.stack and on_host,
        host_patches=settings.patches if on_host else None,
        cast_on_cpu=placement.device.type == "cpu",
    )
    fingerprint = opened.fingerprint(settings.split, anchors.anchors, cast=settings.dtype)
    forcings = plan_forcings(
        settings.forcings,
        opened,
        spec,
        spatial_dims=settings.spatial_dims,
        patches=settings.patches,
    )
    if forcings is not None:  # other forcings are other batches
        fingerprint[FORCINGS_KEY] = forcings.fingerprint()
    # stacked, the forcings are channels of their groups, after the variables
    stacked_forcings = settings.forcings if forcings is not None and settings.stack else ()
    channels = None
    if settings.stack:
        channels = stacked_channels(
            opened, spec, statics, settings.spatial_dims, forcings=stacked_forcings
        )
    # each batch array's channel names, for the state and for `normalise`
    channel_names = partial(
        batch_channel_order,
        opened,
        spec,
        statics,
        stacked=settings.stack,
        spatial_dims=settings.spatial_dims,
        forcings=stacked_forcings,
    )
    levels = any(pick.labels for layout in opened.layouts.values() for pick in layout.picks)
    if settings.stack or levels:
        # the order of the channels, which neither the arrays nor the picks record
        fingerprint[CHANNELS_KEY] = channel_names()
    shares = rank_shares(
        anchors,
        anchors.units,
        rank=placement.rank,
        world_size=placement.world_size,
        partitions=settings.canonical_partitions,
        evaluation=settings.evaluation,
    )
    check_full_batch(shares, settings.batch_size, settings.drop_last, settings.split)
    if settings.cache is not None:
        _warn_if_unversioned(settings.cache, opened)
    choices = choose_loader_settings(
        anchors,
        opened.layouts,
        HostResources.read() if host is None else host,
        batch_size=settings.batch_size,
        block_chunks=settings.block_chunks,
        max_inflight=settings.max_inflight,
        memory_budget=settings.memory_budget,
        decode_threads=settings.decode_threads,
        batches_held=placement.staging_slots,
        shuffle="block" if settings.evaluation else settings.shuffle,
        shuffle_window=settings.shuffle_window,
        world_size=placement.world_size,
        cache_writes=settings.cache is not None and not settings.cache.read_only,
        unit_cost=samples.units.memory_hint(),
        statics=with_forcings(
            statics.cost,
            forcings,
            opened,
            on_host,
            stacked=settings.stack,
            batch_size=settings.batch_size,
        ),
    )
    pinned_by = None
    if placement.page_locked:  # by the stage that writes the batch last
        pinned_by = PINNED_BY_STACK if settings.stack else PINNED_BY_GATHER
    channel_order = None
    if settings.normalise is not None:
        _check_stats_decoding(settings.normalise, opened)
        channel_order = channel_names()
    return LoaderPlan(
        settings=settings,
        source=opened,
        samples=samples,
        fingerprint=fingerprint,
        shares=shares,
        choices=choices,
        pinned_by=pinned_by,
        mixing_measured=not settings.evaluation,
        channel_order=channel_order,
        decodings=field_decodings(
            {n: d for n, d in opened.decodings.items() if n in opened.layouts}, spec
        ),
        statics=statics,
        channels=channels,
        forcings=forcings,
    )


def _check_stats_decoding(stats: StatsLike, opened: ZarrSource) -> None:
    """Refuse statistics computed on values decoded otherwise than this loader's."""
    differences = load_stats(stats).decoding_differences(opened.decoding_records())
    if differences:
        raise ValueError(
            "normalise= statistics do not fit this loader's values: "
            + "; ".join(differences)
            + ". Recompute them (insitubatch stats, or compute_stats with the same "
            "decode_cf= and use_zarr_fill_value_as_mask=)"
        )


def _warn_if_unversioned(spec: CacheSpec, opened: ZarrSource) -> None:
    """Warn when the store (each store of a join) gives no object versions: a chunk
    rewritten in place would then be served old bytes from the cache."""
    stores = [(p.store, p.where) for p in opened.parts] or [(opened.store, opened.where)]
    for store, where in stores:
        if object_versions(store, where, RetryPolicy(), lambda: None).versioned:
            continue
        log.warning(
            "chunk cache: %s gives no object versions; entries are keyed by its arrays' "
            "metadata only, so clear %s after rewriting its chunks in place",
            where,
            spec.folder,
        )
