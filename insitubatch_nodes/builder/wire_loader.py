"""The graph of a plan: the last of `build_loader`'s three steps (`builder.loader_settings`,
`builder.loader_plan`, then this). Every node of the default graph is constructed here and
nowhere else, from the plan alone; nothing is chosen here (the plan holds every choice),
so a hand-built graph given the same values is the same graph.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.builder.loader_plan import PINNED_BY_GATHER, PINNED_BY_STACK, LoaderPlan
from insitubatch_nodes.builder.split_anchors import split_mixing
from insitubatch_nodes.core.forcing_names import chosen_names
from insitubatch_nodes.core.static_fields import region_cut, sample_crop_size
from insitubatch_nodes.loader.loader import Loader
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.cf_decode import NO_NUMPY_DTYPE, CFDecodeNode
from insitubatch_nodes.nodes.chunk_permute import ChunkPermuteNode
from insitubatch_nodes.nodes.forcings import ForcingsNode
from insitubatch_nodes.nodes.gather import GatherNode
from insitubatch_nodes.nodes.normalise import NormaliseNode
from insitubatch_nodes.nodes.pin_to_device import PinToDeviceNode
from insitubatch_nodes.nodes.pool_shuffle import PoolShuffleNode
from insitubatch_nodes.nodes.read_planner import ReadPlanNode
from insitubatch_nodes.nodes.shuffle_block import ShuffleBlockNode
from insitubatch_nodes.nodes.stack_channels import StackChannelsNode
from insitubatch_nodes.nodes.static_fields import StaticFieldsNode


def wire_loader(plan: LoaderPlan) -> Loader[dict[str, torch.Tensor]]:
    """The loader `plan` describes: ChunkPermuteNode -> ReadPlanNode -> AsyncFetchNode ->
    PoolShuffleNode (or ShuffleBlockNode) -> GatherNode [-> CFDecodeNode ->
    StackChannelsNode] [-> ForcingsNode on the CPU] -> PinToDeviceNode [-> CFDecodeNode]
    [-> ForcingsNode] [-> NormaliseNode], in a `Loader`.

    Decoding (`CFDecodeNode`) comes after the device copy when batches cross to a GPU
    unstacked, so packed values cross in their stored width; when stacking, before the
    stack, since one tensor holds one dtype and variables stored in several (or masked
    differently) must be decoded first; on the CPU, where nothing is copied, before the
    device node too, whose producer thread (`device_prefetch`) then decodes while the
    step runs. A `bfloat16` cast, which numpy cannot hold, comes after the device node.
    Always before `NormaliseNode`, which normalises decoded values. Forcings
    (`ForcingsNode`) likewise: computed on the device after the copy, or, on the CPU,
    before the device node, on its producer thread when it has one; stacked, before the
    stack, whose channels they are (and which `NormaliseNode` leaves as they are).

    Static fields are read whole and decoded here, once (`ZarrSource.read_statics`):
    unstacked, they join batches after the device copy (moved to the device once, a
    broadcast view per batch); stacked, before the stack, whose concatenation is their
    one copy.

    Args:
        plan: the plan (`builder.loader_plan.plan_loader`); each call wires a graph of its
            own (fresh threads, block memory and counters) over the same opened source.
    """
    settings, placement, choices = plan.settings, plan.placement, plan.choices
    memory, anchors = choices.plan, plan.samples.anchors
    permute = ChunkPermuteNode(
        anchors,
        anchors.units,
        seed=settings.seed,
        rank=placement.rank,
        world_size=placement.world_size,
        fingerprint=plan.fingerprint,
        evaluation=settings.evaluation,
        follow_process_group=placement.follow_process_group,
        unit_grid=plan.unit_grid,
        canonical_partitions=plan.shares.partitions,
    )
    # the plan checked it; given to the node too, which checks it again if it takes a
    # process group's rank and world size later
    permute.check_full_batch(settings.batch_size, settings.drop_last, settings.split)
    reading = plan.source.read_context(
        retry=settings.retry,
        max_inflight=settings.max_inflight,
        decode_threads=choices.decode_threads,
        zarr_pipeline=settings.zarr_pipeline,
        block_memory_bytes=memory.blocks_alive_bytes,
        inflight_bytes=memory.inflight_bytes,
        cache=settings.cache,
        cache_queue_bytes=memory.cache_queue_bytes,
        unit_length=plan.samples.grid.unit_length,
    )
    plans = ReadPlanNode(permute, anchors, block_chunks=choices.block_chunks)
    blocks = AsyncFetchNode(
        plans,
        reading,
        prefetch_blocks=settings.prefetch_blocks,
        memory_budget=memory.read_ahead_bytes,
        decode_on=placement.decode_on,
        read_across_epochs=settings.read_across_epochs,
    )
    draws: BaseNode[Any]
    if choices.pool_size is None:
        draws = ShuffleBlockNode(
            blocks,
            batch_size=settings.batch_size,
            drop_last=settings.drop_last,
            epoch_keeper=permute,
        )
    else:
        draws = PoolShuffleNode(
            blocks,
            pool_size=choices.pool_size,
            batch_size=settings.batch_size,
            drop_last=settings.drop_last,
            pool_ramp=settings.pool_ramp,
            pool_interleave=settings.pool_interleave,
            epoch_keeper=permute,
            block_planner=plans,
        )
    node: BaseNode[Any] = GatherNode(
        draws,
        pin_memory=plan.pinned_by == PINNED_BY_GATHER,
        pinned_batches=placement.staging_slots,
        uniform_mixing=partial(split_mixing, anchors, settings.batch_size)
        if plan.mixing_measured
        else None,
        copy_pool=reading.decode_pool,
    )
    after_copy = plan.decodings  # decoded after the copy: int16 crosses at half the bytes
    if settings.stack or placement.device.type == "cpu":
        # decoded before the stack (one tensor holds one dtype), or, with no copy to make
        # smaller, where the device node's producer thread overlaps it with the step
        numpy_cast = None if settings.dtype == NO_NUMPY_DTYPE else settings.dtype
        after_copy = plan.cast_decodings() if numpy_cast != settings.dtype else {}
        node = CFDecodeNode(node, plan.decodings, dtype=numpy_cast)
    placements = plan.statics.placements
    static_values: dict[str, Any] = {}
    if placements:
        numpy_cast = None if settings.dtype == NO_NUMPY_DTYPE else settings.dtype
        static_values = plan.source.read_statics(
            numpy_cast, retry=settings.retry, decode_threads=choices.decode_threads
        )
    static_values = {n: region_cut(v, settings.patches) for n, v in static_values.items()}
    patch_size = sample_crop_size(settings.patches)
    stacked_statics = [p for p in placements if settings.stack and p.group is not None]
    if stacked_statics:
        node = StaticFieldsNode(node, static_values, stacked_statics, patch_size=patch_size)
    stacked_forcings = () if plan.forcings is None or not settings.stack else settings.forcings
    if stacked_forcings:  # channels of the stack: made where its batch is, before it
        assert plan.forcings is not None
        node = ForcingsNode(node, plan.forcings)
    if settings.stack:
        node = StackChannelsNode(
            node,
            plan.decoded_layouts(),
            plan.samples.time.spec,
            spatial_dims=settings.spatial_dims,
            pin_memory=plan.pinned_by == PINNED_BY_STACK,
            pinned_batches=placement.staging_slots,
            statics=stacked_statics,
            static_layouts=plan.static_layouts(),
            forcings=stacked_forcings,
        )
    forcings_on_host = (
        plan.forcings is not None and not settings.stack and placement.device.type == "cpu"
    )
    if forcings_on_host:  # as decoding: on the device node's producer thread, if it has one
        assert plan.forcings is not None
        node = ForcingsNode(node, plan.forcings)
    node = PinToDeviceNode(node, device=placement.device, prefetch=placement.device_prefetch)
    if after_copy:
        node = CFDecodeNode(node, after_copy, dtype=settings.dtype)
    copied_statics = [p for p in placements if p not in stacked_statics]
    if copied_statics:
        node = StaticFieldsNode(
            node,
            static_values,
            copied_statics,
            patch_size=patch_size,
            device=placement.device,
            dtype=settings.dtype if settings.dtype == NO_NUMPY_DTYPE else None,
        )
    if plan.forcings is not None and not settings.stack and not forcings_on_host:  # on the device
        node = ForcingsNode(node, plan.forcings, placement.device)
    if settings.normalise is not None:
        assert plan.channel_order is not None  # planned with normalise
        node = NormaliseNode(
            node,
            settings.normalise,
            plan.channel_order,
            spatial_dims=settings.spatial_dims,
            fill_nan=settings.fill_nan,
            as_defined=chosen_names(stacked_forcings),
        )
    return Loader(
        node,
        all_ranks_state=settings.all_ranks_state,
        channels=plan.channels,
        area=plan.source.area,
    )
