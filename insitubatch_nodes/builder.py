"""build_loader: the default six-stage graph in one call."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from zarr.abc.store import Store

from insitubatch_nodes.core.memory_bound import plan_memory
from insitubatch_nodes.io.zarr_source import ManifestLike, ZarrSource
from insitubatch_nodes.loader import Loader
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.chunk_permute import ChunkPermuteNode
from insitubatch_nodes.nodes.gather import GatherNode
from insitubatch_nodes.nodes.pin_to_device import (
    PinToDeviceNode,
    default_prefetch,
    resolve_device,
)
from insitubatch_nodes.nodes.read_plan import ReadPlanNode
from insitubatch_nodes.nodes.shuffle_block import ShuffleBlockNode


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Explicit values first, then an initialised torch.distributed, then RANK/WORLD_SIZE."""
    if rank is not None and world_size is not None:
        return rank, world_size
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        found = torch.distributed.get_rank(), torch.distributed.get_world_size()
    else:
        found = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    return (found[0] if rank is None else rank), (found[1] if world_size is None else world_size)


def build_loader(
    source: str | Path | Store,
    variables: Sequence[str] | None = None,
    split: str = "train",
    *,
    batch_size: int = 32,
    block_chunks: int = 8,
    max_inflight: int = 64,
    prefetch_blocks: int = 2,
    memory_budget: int = 1 << 30,
    seed: int = 0,
    rank: int | None = None,
    world_size: int | None = None,
    device: str | torch.device | None = None,
    manifest: ManifestLike | None = None,
    drop_last: bool = False,
    storage_options: dict[str, Any] | None = None,
    decode_threads: int | None = None,
    zarr_pipeline: str | None = None,
    device_prefetch: int | None = None,
    decode: str = "cpu",
) -> Loader[dict[str, torch.Tensor]]:
    """Shuffled, split-aware, resumable batches from a Zarr group.

    Each batch is `{variable: tensor (batch, *sample_shape), "sample_index": int64}`.
    `block_chunks` units are read and shuffled together: larger blocks shuffle better and
    hold more memory. `memory_budget` (bytes) bounds all the loader holds at once: the
    shuffle window, the batch being gathered and the reads in flight come first, and the
    rest caps the blocks read ahead (`core.memory_bound`); reading runs until
    `2 * max_inflight` chunk reads are pending. Every rank yields the same number of
    batches per epoch. `zarr_pipeline="zarrs"` speeds up arrays that zarr must decode
    itself (filters, F order); common layouts are decoded by the library either way.
    `device_prefetch` batches are copied to the GPU ahead of the one handed out (default 2
    on CUDA). `decode="gpu"` decodes chunks on the GPU (the `gpu` extra: nvCOMP for
    zstd; uncompressed chunks need nothing): only compressed bytes cross to the device.
    Arrays it cannot decode there are decoded on the CPU, and the log says why.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if block_chunks < 1:
        raise ValueError(f"block_chunks must be >= 1, got {block_chunks}")
    if device_prefetch is not None and device_prefetch < 0:
        raise ValueError(f"device_prefetch must be >= 0 batches, got {device_prefetch}")
    target = resolve_device(device)
    prefetch = default_prefetch(target) if device_prefetch is None else device_prefetch
    if decode not in ("cpu", "gpu"):
        raise ValueError(f"decode must be 'cpu' or 'gpu', got {decode!r}")
    if decode == "gpu" and target.type != "cuda":
        raise ValueError(
            f"decode='gpu' needs a CUDA device, but the loader's device is {target}; "
            f"pass decode='cpu' on a machine without CUDA"
        )
    decode_on = target if decode == "gpu" else None
    staged = target.type == "cuda" and decode_on is None  # the gather fills the pinned ring
    rank, world_size = resolve_rank(rank, world_size)
    opened = ZarrSource.open(source, variables, manifest=manifest, storage_options=storage_options)
    permute = ChunkPermuteNode(
        opened.geometry, opened.split_units(split), seed=seed, rank=rank, world_size=world_size
    )
    if permute.samples_per_rank(batch_size, drop_last) == 0:
        raise ValueError(
            f"batch_size={batch_size} with drop_last=True leaves no full batch: the smallest "
            f"rank holds {permute.min_rank_samples} samples of split {split!r}; lower "
            f"batch_size or set drop_last=False"
        )
    memory = plan_memory(
        memory_budget,
        opened.layouts,
        batch_size=batch_size,
        block_samples=block_chunks * opened.geometry.unit_length,
        max_inflight=max_inflight,
        batches_held=PinToDeviceNode.staging_slots(prefetch) if staged else 1,
    )
    plans = ReadPlanNode(permute, opened.geometry, block_chunks=block_chunks)
    blocks = AsyncFetchNode(
        plans,
        opened.store,
        opened.layouts,
        max_inflight=max_inflight,
        prefetch_blocks=prefetch_blocks,
        memory_budget=memory.read_ahead_bytes,
        decode_threads=decode_threads,
        where=opened.where,
        zarr_pipeline=zarr_pipeline,
        decode_on=decode_on,
    )
    draws = ShuffleBlockNode(blocks, batch_size=batch_size, drop_last=drop_last)
    gathered = GatherNode(draws)
    moved = PinToDeviceNode(gathered, device=target, prefetch=prefetch)
    if staged and moved.copier is not None:
        gathered.allocate = moved.copier.stage
    return Loader(moved)
