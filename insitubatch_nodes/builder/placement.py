"""Where a loader's work runs: this process's rank among how many, the device batches go
to and the one chunks are decoded on, and how many batches are staged for the copy.

All are resolved once, when `build_loader` checks its settings, from what the user gave
and what the process shows (an initialised torch.distributed, torchrun's RANK/WORLD_SIZE,
CUDA), and refused by name when they cannot hold: an environment variable that is not an
int, `decode="gpu"` without a CUDA device. The nodes take them as plain values
(`Placement`); how they are found is kept here, apart from the wiring of the graph.
`insitubatch inspect` asks the same functions for the device default and the staging.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from insitubatch_nodes.core.settings import int_from_environment
from insitubatch_nodes.device.copy_ahead import default_prefetch, staging_slots
from insitubatch_nodes.nodes.pin_to_device import resolve_device


@dataclass(frozen=True)
class Placement:
    """Where one loader's work runs, resolved.

    Args:
        rank: this process's rank, in [0, world_size).
        world_size: the number of ranks sharing the split.
        follow_process_group: rank and world size were found before any process group
            existed, so one started before the loader is first used is followed
            (`ChunkPermuteNode(follow_process_group=...)`).
        device: where batches go.
        decode_on: the device blocks are decoded on, or None for the host.
        device_prefetch: batches gathered (and on CUDA copied) ahead of the consumer.
    """

    rank: int
    world_size: int
    follow_process_group: bool
    device: torch.device
    decode_on: torch.device | None
    device_prefetch: int

    @property
    def staging_slots(self) -> int:
        """Gathered batches alive at once: the prefetched ones and the newest (the
        staging ring on CUDA, counted in the memory plan)."""
        return staging_slots(self.device_prefetch)

    @property
    def page_locked(self) -> bool:
        """Whether host batches are written page-locked: they are bound for a GPU and not
        decoded there (a batch decoded on the device never lands on the host)."""
        return self.device.type == "cuda" and self.decode_on is None


def default_device_type() -> str:
    """Where batches go when the user names no device: `"cuda"` if this process has CUDA,
    else `"cpu"`. Asked without starting a CUDA context."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def batch_device(device: str | torch.device | None) -> torch.device:
    """The device batches go to: the one given (refused by name if CUDA is asked for
    where there is none), else `default_device_type`'s, the current CUDA device's index
    filled in.

    Args:
        device: a device, its name, or None for the default.
    """
    return resolve_device(default_device_type() if device is None else device)


def prefetch_for(device: torch.device, given: int | None) -> int:
    """Batches copied ahead: those given, else `device.copy_ahead.default_prefetch`'s for
    the device (some on CUDA, none on the CPU, where nothing is copied).

    Args:
        device: where batches go.
        given: the user's `device_prefetch` (an int >= 0), or None.
    """
    return default_prefetch(device) if given is None else given


def process_rank(rank: int | None, world_size: int | None) -> tuple[int, int, bool]:
    """This process's rank and world size (`resolve_rank`), and whether a process group
    started later is to be followed: neither was given and none exists yet (Lightning's
    DDP starts it after the loader is built).

    Args:
        rank: the rank given, or None to find it.
        world_size: the world size given, or None to find it.
    """
    grouped = torch.distributed.is_available() and torch.distributed.is_initialized()
    follow = rank is None and world_size is None and not grouped
    return (*resolve_rank(rank, world_size), follow)


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
