"""Build the default graph stage by stage, and fingerprint what each stage yields."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torchdata.nodes import BaseNode
from zarr.abc.store import Store

from insitubatch_nodes import (
    AnchorSet,
    AsyncFetchNode,
    ChunkPermuteNode,
    GatherNode,
    PatchSpec,
    PinToDeviceNode,
    PoolShuffleNode,
    ReadPlanNode,
    RetryPolicy,
    SampleGeometry,
    SampleSpec,
    ShuffleBlockNode,
    ZarrSource,
)
from insitubatch_nodes.core.area import Area
from insitubatch_nodes.core.memory_bound import DEFAULT_MEMORY_BUDGET
from insitubatch_nodes.core.pool_order import POOL_RAMP
from insitubatch_nodes.core.read_plan import ReadPlan
from insitubatch_nodes.io.metadata.levels import LevelsLike
from insitubatch_nodes.io.reads.block_reader import ReadContext
from insitubatch_nodes.nodes.batch_mixing import draw_samples_and_units
from insitubatch_nodes.nodes.items import BatchDraw, FetchedBlock, UnitTicket
from tests.helpers.batches import batch_key

STAGES = ["permute", "plan", "fetch", "shuffle", "gather", "device"]


def build_stage(
    url: str | Store,
    stage: str,
    *,
    split: str = "all",
    seed: int = 0,
    rank: int = 0,
    world_size: int = 1,
    block_chunks: int = 2,
    batch_size: int = 5,
    drop_last: bool = False,
    max_inflight: int = 4,
    prefetch_blocks: int = 2,
    fast_path: bool = True,
    zarr_pipeline: str | None = None,
    spec: SampleSpec | None = None,
    patches: PatchSpec | None = None,
    device: str = "cpu",
    prefetch: int | None = None,
    decode_on: torch.device | None = None,
    retry: RetryPolicy | None = None,
    read_across_epochs: bool = False,
    block_memory_bytes: int = DEFAULT_MEMORY_BUDGET,
    pool_size: int | None = None,
    pool_ramp: int = POOL_RAMP,
    pool_interleave: bool = True,
    unit_length: int | None = None,
    levels: LevelsLike | None = None,
    area: Area | None = None,
) -> BaseNode[Any]:
    """The default graph up to `stage`; with `pool_size`, its shuffle is the pool's (filling
    as `pool_ramp` says, interleaving batches as `pool_interleave` does); with
    `unit_length`, its units are that long (any length: a fine grid, revisits); with
    `levels`, the variables keep those levels (`ZarrSource.open`'s `levels`; `area`, the
    box's grid points). The
    shuffle is given its peers as `build_loader` gives them, so that a stage iterated
    without a `Loader` counts its batches and resumes as in a loader."""
    source = ZarrSource.open(url, levels=levels, area=area)
    if unit_length is None:
        anchors = AnchorSet.for_split(source.geometry, source.split_units(split), spec, patches)
    else:
        grid = SampleGeometry(source.geometry.variables, unit_length)
        anchors = AnchorSet.for_steps(grid, source.step_ranges(split), spec, patches)
    node: BaseNode[Any] = ChunkPermuteNode(
        anchors, anchors.units, seed=seed, rank=rank, world_size=world_size
    )
    built = {"permute": node}  # each stage's node, for the links the shuffle is given
    steps: list[tuple[str, Callable[[BaseNode[Any]], BaseNode[Any]]]] = [
        ("plan", lambda n: ReadPlanNode(n, anchors, block_chunks=block_chunks)),
        (
            "fetch",
            lambda n: AsyncFetchNode(
                n,
                ReadContext.create(
                    source.store,
                    source.layouts,
                    max_inflight=max_inflight,
                    where=str(url),
                    fast_path=fast_path,
                    zarr_pipeline=zarr_pipeline,
                    retry=retry,
                    block_memory_bytes=block_memory_bytes,
                    unit_length=unit_length,
                ),
                prefetch_blocks=prefetch_blocks,
                decode_on=decode_on,
                read_across_epochs=read_across_epochs,
            ),
        ),
        (
            "shuffle",
            lambda n: (
                ShuffleBlockNode(
                    n, batch_size=batch_size, drop_last=drop_last, epoch_keeper=built["permute"]
                )
                if pool_size is None
                else PoolShuffleNode(
                    n,
                    pool_size=pool_size,
                    batch_size=batch_size,
                    drop_last=drop_last,
                    pool_ramp=pool_ramp,
                    pool_interleave=pool_interleave,
                    epoch_keeper=built["permute"],
                    block_planner=built["plan"],
                )
            ),
        ),
        ("gather", GatherNode),
        ("device", lambda n: PinToDeviceNode(n, device=device, prefetch=prefetch)),
    ]
    for name, wrap in steps:
        if STAGES.index(name) > STAGES.index(stage):
            break
        node = built[name] = wrap(node)
    return node


def fingerprint(item: Any) -> Any:
    """A hashable, comparable summary of any stage's item, array values included."""
    if isinstance(item, UnitTicket):
        return ("ticket", item.assignment.epoch, item.position, item.unit)
    if isinstance(item, ReadPlan):
        return ("plan", item.assignment.epoch, item.block_index, tuple(item.units.tolist()))
    if isinstance(item, FetchedBlock):
        return (
            "block",
            fingerprint(item.plan),
            tuple((k, item.buffer(k).tobytes()) for k in sorted(item.arrays)),
        )
    if isinstance(item, BatchDraw):
        return ("draw", tuple(draw_samples_and_units(item)[0].tolist()))
    return batch_key(item)
