"""Where a loader's work runs: this process's rank among how many, and the device its
chunks are decoded on.

Both are resolved once, when `build_loader` runs, from what the user gave and what the
process shows (an initialised torch.distributed, torchrun's RANK/WORLD_SIZE, the batch
device), and both are refused by name when they cannot hold: an environment variable that
is not an int, `decode="gpu"` without a CUDA device. The nodes take both as plain
values; how they are found is kept here, apart from the wiring of the graph.
"""

from __future__ import annotations

import os

import torch

from insitubatch_nodes.core.settings import int_from_environment


def resolve_rank(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Explicit values first, then an initialised torch.distributed, then RANK/WORLD_SIZE
    (an error names a variable that is set to something other than an int).

    Args:
        rank: this process's rank, or None to find it.
        world_size: the number of ranks, or None to find it.
    """
    if rank is not None and world_size is not None:
        return rank, world_size
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        found = torch.distributed.get_rank(), torch.distributed.get_world_size()
    else:
        found = (
            int_from_environment(os.environ, "RANK", 0),
            int_from_environment(os.environ, "WORLD_SIZE", 1),
        )
    return (found[0] if rank is None else rank), (found[1] if world_size is None else world_size)


def decode_device(decode: str, target: torch.device) -> torch.device | None:
    """The device blocks are decoded on: `target` for `decode="gpu"` (which needs it to be
    a CUDA device), None (the host) for `"cpu"`.

    Args:
        decode: `"cpu"` or `"gpu"`.
        target: where batches go.
    """
    if decode not in ("cpu", "gpu"):
        raise ValueError(f"decode must be 'cpu' or 'gpu', got {decode!r}")
    if decode == "gpu" and target.type != "cuda":
        raise ValueError(
            f"decode='gpu' needs a CUDA device, but the loader's device is {target}; "
            f"pass decode='cpu' on a machine without CUDA"
        )
    return target if decode == "gpu" else None
