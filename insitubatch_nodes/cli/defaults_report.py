"""What `build_loader`'s defaults would choose for a store on this host, without building
a loader: the block size, the memory plan and the decode threads, with why, or the
refusal and a budget that fits. `insitubatch inspect` prints it.

Nothing here decides: the device default and the batches staged for it
(`builder.placement`), the unit grid and the split's anchors
(`builder.split_anchors.plan_split`) and the choices (`builder.loader_choices`) come from
the functions a loader's plan (`builder.loader_plan`) calls, so what it says is what a
loader would do. What it adds is only for the reader: the mixing a pool gives, what its
ramp costs, and what the same settings would give without windows or revisits.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch

from insitubatch_nodes.builder.batch_layouts import stacked_channels
from insitubatch_nodes.builder.fitting_budget import budget_that_fits, defaults_fit
from insitubatch_nodes.builder.forcing_memory import with_forcings
from insitubatch_nodes.builder.forcing_plan import plan_forcings
from insitubatch_nodes.builder.host_too_small import HostTooSmallError
from insitubatch_nodes.builder.loader_choices import LoaderChoices, choose_loader_settings
from insitubatch_nodes.builder.placement import default_device_type, prefetch_for
from insitubatch_nodes.builder.split_anchors import plan_split
from insitubatch_nodes.builder.static_plan import plan_statics
from insitubatch_nodes.builder.time_selection import Duration
from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.byte_sizes import parse_nbytes, size_argument
from insitubatch_nodes.core.channels import DEFAULT_SPATIAL_DIMS
from insitubatch_nodes.core.inflight_target import CEILING
from insitubatch_nodes.core.memory_bound import MemoryPlan
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.pool_order import POOL_RAMP
from insitubatch_nodes.core.pool_ramp import PoolRamp, pool_ramp
from insitubatch_nodes.core.quality import uniform_distinct_units
from insitubatch_nodes.core.sample_spec import SampleSpec
from insitubatch_nodes.device.copy_ahead import staging_slots
from insitubatch_nodes.io.host.host_resources import HostResources
from insitubatch_nodes.io.stores.redact import redact
from insitubatch_nodes.io.zarr_source import ZarrSource


@dataclass(frozen=True)
class LoaderDefaults:
    """What `build_loader` would choose for these settings on this host.

    Args:
        split: the split planned for.
        split_samples: its samples (time steps).
        unit_steps: steps in one unit (what the loader shuffles and splits by): a visit's,
            with revisits.
        batch_size: samples per batch.
        memory_budget: the budget, in bytes: the one given, else the host's choice (the
            host's share of memory when refused).
        memory_from: why that budget ("given", or how the host's share makes it).
        device: where batches would go ("cpu" or "cuda").
        batches_held: gathered batches alive at once (the staging ring on CUDA).
        decode_threads: threads of the decode pool.
        threads_from: why that many ("given", or the host's cores and ranks).
        host: the host the defaults follow (its memory, cores and local ranks).
        block_chunks: units per block, or None when refused.
        block_from: why that many, or None when refused.
        block_samples: buffer rows of one block, at most, or None when refused.
        plan: how the budget splits (`MemoryPlan`), or None when refused.
        reads_in_flight: about how many reads of this store's stored chunks the
            budget's share for reads in flight holds (at most the ceiling), or None.
        refused: the loader's refusal (a budget too small), or None.
        fitting_budget: a budget the defaults fit in (one byte less does not), when refused.
        fitting_argument: that budget as a `--memory-budget` value, short to type.
        pool_size: the pool shuffle's units (P), or None when refused.
        pool_from: why that many, or None when refused.
        mixing: distinct units per batch a pool of P units gives, at most about (a uniform
            shuffle of P units' samples), and what a uniform shuffle of the split gives,
            exactly (`core.quality.uniform_distinct_units`), before any read; or None.
        pool_ramp: how fast the pool fills at an epoch's start (`build_loader`'s default,
            `core.pool_order.POOL_RAMP`).
        ramp: what that ramp costs an epoch's first batches (`core.pool_ramp`): the
            batches drawn from a pool still filling, their mixing, and what the first
            batch waits for; or None without a pool.
        spec_span: the stored steps a sample's windows reach before and after its anchor
            (strides counted in steps), when planned for windows (`spec`), else None.
        pool_without_windows: P for the same settings with samples of one step, when
            planned for windows: what their halo chunks cost the pool.
        revisits: visits per unit and epoch planned for (`build_loader(revisits=...)`).
        pool_without_revisits: P for the same settings with one visit per unit, when
            planned for revisits: what they gain the pool (for as many times the reads).
        stride_units: with a stride or frequency planned for, the units it is dealt in and
            why (`core.stride_units`), else None.
        channels: planned for `stack=True`, each stacked tensor's channel names in order
            (what `Loader.channels` gives), else None.
    """

    split: str
    split_samples: int
    unit_steps: int
    batch_size: int
    memory_budget: int
    memory_from: str
    device: str
    batches_held: int
    decode_threads: int
    threads_from: str
    host: HostResources
    block_chunks: int | None
    block_from: str | None
    block_samples: int | None
    plan: MemoryPlan | None
    reads_in_flight: int | None
    refused: str | None
    fitting_budget: int | None
    fitting_argument: str | None
    pool_size: int | None = None
    pool_from: str | None = None
    mixing: tuple[float, float] | None = None
    pool_ramp: int = POOL_RAMP
    ramp: PoolRamp | None = None
    spec_span: tuple[int, int] | None = None
    pool_without_windows: int | None = None
    revisits: int = 1
    pool_without_revisits: int | None = None
    stride_units: str | None = None
    channels: dict[str, list[str]] | None = None


def _first_batches(anchors: AnchorSet, pool_size: int, batch_size: int) -> PoolRamp:
    """How `build_loader`'s default pool (seed 0, its default ramp, no `drop_last`) starts
    the first epoch of a rank holding the whole split. Every epoch ramps the same way;
    other seeds and epochs draw other samples, so their numbers differ a little."""
    assignment = assign_epoch(anchors, anchors.units, seed=0, epoch=0, rank=0, world_size=1)
    return pool_ramp(
        anchors,
        assignment,
        pool_size=pool_size,
        batch_size=batch_size,
        drop_last=False,
        ramp=POOL_RAMP,
    )


def loader_defaults(
    opened: ZarrSource,
    split: str,
    *,
    batch_size: int,
    memory_budget: int | None,
    device: str | None,
    mean_read_bytes: float | None,
    secrets: Iterable[str],
    host: HostResources | None = None,
    spec: SampleSpec | None = None,
    revisits: int = 1,
    stride: int | None = None,
    frequency: Duration | None = None,
    stack: bool = False,
    forcings: tuple[str, ...] = (),
) -> LoaderDefaults:
    """What `build_loader(url, variables, split, batch_size=..., memory_budget=...)`
    would plan: the same anchors, device default, staging slots and choices.

    Args:
        opened: the opened store and its selected arrays.
        split: the split planned for.
        batch_size: samples per batch.
        memory_budget: the budget, in bytes, or None for the host's share (as
            `build_loader`'s default).
        device: "cpu" or "cuda", or None for build_loader's default.
        mean_read_bytes: mean stored bytes of one chunk read, or None when unmeasured.
        secrets: texts to keep out of the refusal message.
        host: the host to plan for (default `HostResources.read()`, as `build_loader`).
        spec: the samples' windows and leads, as `build_loader` takes them (default: one
            step per sample): each unit's slot then also holds the chunks its windows
            reach into, so the same window bytes hold fewer units.
        revisits: visits per unit and epoch, as `build_loader` takes them: the units
            planned for are the visits (`SampleGeometry.visits`).
        stride: every k-th step an anchor, as `build_loader` takes it (the spec's offsets
            then count strides), or None: the units planned for are those it is dealt in
            (`core.stride_units`).
        frequency: instead of `stride`, the anchors' spacing as a duration, or None.
        stack: plan for `build_loader(stack=True)`: the channel list, and the static
            fields' stacked copies counted in the batches.
        forcings: plan for `build_loader(forcings=...)`: the checked names
            (`core.forcing_names.check_forcing_names`), their memory on the plan and their
            channels in the list.
    """
    if device is None:  # build_loader's default, without starting a CUDA context
        device = default_device_type()
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    host = HostResources.read() if host is None else host
    held = staging_slots(prefetch_for(torch.device(device), None))
    timing: dict[str, Any] = {"stride": stride, "frequency": frequency}
    planned = plan_split(opened, split, spec, revisits=revisits, **timing)
    grid, anchors = planned.grid, planned.anchors
    statics = plan_statics(opened, spec, cast=None, stacked_on_host=stack, host_patches=None)
    forcing_plan = plan_forcings(
        forcings, opened, planned.time.spec, spatial_dims=DEFAULT_SPATIAL_DIMS, patches=None
    )
    held_cost = with_forcings(
        statics.cost,
        forcing_plan,
        opened,
        stack or device == "cpu",  # where build_loader computes them (statics likewise)
        stacked=stack,
        batch_size=batch_size,
    )
    samples = int(anchors.unit_sizes(anchors.units).sum())
    refused: str | None = None
    fitting: int | None = None
    argument: str | None = None
    block_chunks: int | None = None
    block_from: str | None = None
    block_samples: int | None = None
    plan: MemoryPlan | None = None
    reads: int | None = None
    pool_size: int | None = None
    pool_from: str | None = None
    mixing: tuple[float, float] | None = None
    ramp: PoolRamp | None = None
    pool_without_windows: int | None = None
    pool_without_revisits: int | None = None
    budget = host.memory_budget() if memory_budget is None else memory_budget
    memory_from = host.memory_text() if memory_budget is None else "given"

    def choose(samples_of: AnchorSet) -> LoaderChoices:
        return choose_loader_settings(
            samples_of,
            opened.layouts,
            host,
            batch_size=batch_size,
            block_chunks=None,
            max_inflight=None,
            memory_budget=memory_budget,
            decode_threads=None,
            batches_held=held,
            unit_cost=planned.units.memory_hint(),
            statics=held_cost,
        )

    try:
        chosen = choose(anchors)
    except HostTooSmallError as err:
        refused = redact(str(err), secrets)
        fitting = err.least_budget
    except ValueError as err:
        refused = redact(str(err), secrets)
        fitting = budget_that_fits(
            anchors,
            opened.layouts,
            batch_size=batch_size,
            batches_held=held,
            above=budget,
            statics=held_cost,
        )
    else:
        budget, memory_from, plan = chosen.memory_budget, chosen.memory_from, chosen.plan
        pool_size, pool_from = chosen.pool_size, chosen.pool_from
        if pool_size is not None:
            sizes = anchors.unit_sizes(anchors.units)
            mixing = (
                uniform_distinct_units(sizes[:pool_size], batch_size),
                uniform_distinct_units(sizes, batch_size),
            )
            ramp = _first_batches(anchors, pool_size, batch_size)
        if spec is not None and pool_size is not None:
            try:
                plain = plan_split(opened, split, None, revisits=revisits, **timing).anchors
                pool_without_windows = choose(plain).pool_size
            except ValueError:
                pool_without_windows = None
        if revisits > 1 and pool_size is not None:
            try:
                once = plan_split(opened, split, spec, **timing).anchors
                pool_without_revisits = choose(once).pool_size
            except ValueError:
                pool_without_revisits = None
        block_chunks, block_from = chosen.block_chunks, chosen.block_from
        block_samples = anchors.block_rows_bound(block_chunks)
        if mean_read_bytes:
            reads = max(1, min(CEILING, int(plan.inflight_bytes // mean_read_bytes)))
    if fitting is not None:  # a rounder value above the least may not fit: check it
        argument = size_argument(fitting)
        fits = defaults_fit(
            parse_nbytes(argument),
            anchors,
            opened.layouts,
            batch_size=batch_size,
            batches_held=held,
            statics=held_cost,
        )
        if not fits:
            argument = str(fitting)
    return LoaderDefaults(
        split=split,
        split_samples=samples,
        unit_steps=grid.unit_length,
        batch_size=batch_size,
        memory_budget=budget,
        memory_from=memory_from,
        device=device,
        batches_held=held,
        decode_threads=host.decode_threads(),
        threads_from=host.threads_text(),
        host=host,
        block_chunks=block_chunks,
        block_from=block_from,
        block_samples=block_samples,
        plan=plan,
        reads_in_flight=reads,
        refused=refused,
        fitting_budget=fitting,
        fitting_argument=argument,
        pool_size=pool_size,
        pool_from=pool_from,
        mixing=mixing,
        ramp=ramp,
        spec_span=None if planned.time.spec is None else planned.time.spec.span,
        pool_without_windows=pool_without_windows,
        revisits=revisits,
        pool_without_revisits=pool_without_revisits,
        stride_units=planned.units.text() if planned.time.steps > 1 else None,
        channels=stacked_channels(
            opened, planned.time.spec, statics, DEFAULT_SPATIAL_DIMS, forcings=forcings
        )
        if stack
        else None,
    )
