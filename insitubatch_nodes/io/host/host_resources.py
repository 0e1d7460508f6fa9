"""The host a loader runs on, and each rank's share of it.

A fixed default fits no host: 1 GiB refuses a store of 154 MB chunks on a machine with
hundreds of GiB free, and a decode pool sized to all the cores, started by each of eight
ranks on one host, oversubscribes it eightfold. So the defaults that only change how fast
and how much is read (the memory budget, the decode threads) come from the host: what
memory is available now, which cores this process may run on, and how many ranks share
them (`LOCAL_WORLD_SIZE`, as torchrun and accelerate set it; where no launcher says,
what Lightning's DDP launcher or a process group gives: `local_ranks_of`), each rank
taking its share.
Nothing that changes the batches is taken from here (see `builder.loader_choices`).

`HostResources` is plain data read once, by `HostResources.read()`, when a loader is
built: tests and tools pass one of their own instead of changing the machine.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from insitubatch_nodes.core.settings import as_int, int_from_environment

# Half of what is available goes to the loaders of the host's ranks: the other half is
# left to the model, the training framework and the page cache local reads live on.
MEMORY_SHARE = 2
MAX_DECODE_THREADS = 32  # the decode pool's size at most, as before it followed ranks
# Where launchers say how many ranks run on this host: torchrun and accelerate, then the
# MPI launchers accelerate also reads (`accelerate.utils.environment`).
LOCAL_RANKS_VARIABLES = (
    "LOCAL_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "MPI_LOCALNRANKS",
    "MV2_COMM_WORLD_LOCAL_SIZE",
)
FALLBACK_MEMORY = 4 << 30  # bytes assumed available where the system says nothing

_MEMINFO = Path("/proc/meminfo")
_CGROUP = Path("/sys/fs/cgroup")  # the v2 hierarchy (a container's own, mounted at root)
_CGROUP_V1_MEMORY = _CGROUP / "memory"


@dataclass(frozen=True)
class HostResources:
    """What this host offers the loaders of its ranks.

    Args:
        memory_bytes: memory available now, in bytes (to all the host's ranks together).
        cores: CPU cores this process may run on.
        local_ranks: training processes (ranks) on this host, this one included.
        memory_from: where `memory_bytes` was read, for the log (e.g. "MemAvailable").
        local_ranks_from: where `local_ranks` was read (e.g. "LOCAL_WORLD_SIZE").
    """

    memory_bytes: int
    cores: int
    local_ranks: int = 1
    memory_from: str = "given"
    local_ranks_from: str = "given"

    def __post_init__(self) -> None:
        for name, minimum in (("memory_bytes", 0), ("cores", 1), ("local_ranks", 1)):
            object.__setattr__(self, name, as_int(name, getattr(self, name), minimum=minimum))

    @classmethod
    def read(cls, environ: Mapping[str, str] | None = None) -> HostResources:
        """This host as it is now: available memory (`/proc/meminfo`'s MemAvailable, less
        where a cgroup limit leaves less; else the free pages), the cores this process may
        use (its CPU affinity, less where a cgroup quota allows less), and the ranks on
        the host from the launcher's environment, the GPUs and the process group
        (`local_ranks_of`; 1 when none says).

        Args:
            environ: the environment to read the ranks from (default `os.environ`).

        Raises:
            ValueError: a ranks variable holds something other than an int >= 1.
        """
        environ = os.environ if environ is None else environ
        memory, memory_from = _available_memory()
        grouped = torch.distributed.is_available() and torch.distributed.is_initialized()
        ranks, ranks_from = local_ranks_of(
            environ,
            gpus=torch.cuda.device_count(),
            group_size=torch.distributed.get_world_size() if grouped else None,
            group_backend=str(torch.distributed.get_backend()) if grouped else None,
        )
        return cls(memory, _usable_cores(), ranks, memory_from, ranks_from)

    @property
    def rank_memory_bytes(self) -> int:
        """This rank's part of the available memory: an equal share of the host's."""
        return self.memory_bytes // self.local_ranks

    def memory_budget(self) -> int:
        """The memory budget a rank's loader takes by default: 1/`MEMORY_SHARE` of its
        part of the available memory (at least one byte, so a full host is refused by the
        plan with the numbers, not here)."""
        return max(1, self.rank_memory_bytes // MEMORY_SHARE)

    def decode_threads(self) -> int:
        """The decode threads a rank's loader starts by default: its equal share of the
        cores (at least 1, at most `MAX_DECODE_THREADS`)."""
        return max(1, min(MAX_DECODE_THREADS, self.cores // self.local_ranks))

    def memory_text(self) -> str:
        """How the default budget follows from the host, in words (for the log and
        refusals)."""
        ranks = f" shared by {self.local_ranks} local ranks ({self.local_ranks_from})"
        return f"1/{MEMORY_SHARE} of {self.memory_bytes} bytes available ({self.memory_from})" + (
            ranks if self.local_ranks > 1 else ""
        )

    def threads_text(self) -> str:
        """How the default decode threads follow from the host, in words."""
        ranks = (
            f" / {self.local_ranks} local ranks ({self.local_ranks_from})"
            if self.local_ranks > 1
            else ""
        )
        return f"{self.cores} cores{ranks}"


def meminfo_available(text: str) -> int | None:
    """Bytes of MemAvailable in the text of `/proc/meminfo`, or None when absent.

    Args:
        text: the file's text.
    """
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "MemAvailable":
            number, _, unit = value.strip().partition(" ")
            return int(number) * (1024 if unit.strip().lower() == "kb" else 1)
    return None


def cgroup_memory_left(limit_text: str, usage_text: str) -> int | None:
    """Bytes a cgroup may still allocate (its limit less its usage), or None without a
    limit ("max" in v2; v1 writes a number near 2**63).

    Args:
        limit_text: `memory.max` (v2) or `memory.limit_in_bytes` (v1).
        usage_text: `memory.current` (v2) or `memory.usage_in_bytes` (v1).
    """
    limit = limit_text.strip()
    if limit == "max" or not limit.isdigit() or int(limit) >= 1 << 60:
        return None
    usage = usage_text.strip()
    return max(0, int(limit) - (int(usage) if usage.isdigit() else 0))


def cgroup_cpu_quota(text: str) -> int | None:
    """Whole cores a cgroup v2 `cpu.max` ("QUOTA PERIOD", or "max PERIOD") allows, rounded
    up, or None without a quota.

    Args:
        text: the file's text.
    """
    parts = text.split()
    if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return max(1, math.ceil(int(parts[0]) / max(1, int(parts[1]))))


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError):
        return None


def _available_memory() -> tuple[int, str]:
    found: tuple[int, str] | None = None
    meminfo = _read(_MEMINFO)
    available = None if meminfo is None else meminfo_available(meminfo)
    if available is not None:
        found = available, "MemAvailable"
    else:
        try:
            pages = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pages = -1
        if pages > 0:
            found = pages, "free pages"
    for limit, usage in (
        (_CGROUP / "memory.max", _CGROUP / "memory.current"),
        (_CGROUP_V1_MEMORY / "memory.limit_in_bytes", _CGROUP_V1_MEMORY / "memory.usage_in_bytes"),
    ):
        limit_text, usage_text = _read(limit), _read(usage)
        if limit_text is None:
            continue
        left = cgroup_memory_left(limit_text, usage_text or "")
        if left is not None and (found is None or left < found[0]):
            found = left, "the cgroup's memory limit less its use"
        break
    return found if found is not None else (FALLBACK_MEMORY, "nothing said: assumed")


def _usable_cores() -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    cpu_max = _read(_CGROUP / "cpu.max")
    quota = None if cpu_max is None else cgroup_cpu_quota(cpu_max)
    return max(1, min(cores, quota) if quota is not None else cores)


def local_ranks_of(
    environ: Mapping[str, str],
    *,
    gpus: int,
    group_size: int | None,
    group_backend: str | None = None,
) -> tuple[int, str]:
    """The ranks on this host, this one included, and where that was read.

    A launcher's own count first (`LOCAL_RANKS_VARIABLES`). Lightning's DDP launcher sets
    none: it sets `WORLD_SIZE` (processes per node times nodes) and `LOCAL_RANK`, and a
    process group started otherwise (`torch.multiprocessing.spawn`) has only its world
    size. On one node that is the count; on several it counts every node's ranks, so on
    GPUs it is taken at most as the GPUs this process sees (one rank per GPU), and on the
    CPU as it is: without GPUs, or where the process group talks over gloo alone (ranks
    that train on the CPU, however many GPUs the host has). Either way it errs on the safe
    side: a rank takes less than its share of memory and cores, never more, where a host
    running eight ranks that each took it whole would be oversubscribed eightfold. The one
    exception: a launcher that shows each rank only its own GPU (`CUDA_VISIBLE_DEVICES` per
    rank) leaves each seeing fewer GPUs than the host runs ranks; set `LOCAL_WORLD_SIZE`.

    Args:
        environ: the process's environment.
        gpus: the CUDA devices this process sees (0 without CUDA).
        group_size: the initialised process group's world size, or None without one.
        group_backend: its backend (`torch.distributed.get_backend()`), or None.

    Raises:
        ValueError: a variable read holds something other than an int >= 1.
    """
    for variable in LOCAL_RANKS_VARIABLES:
        if variable in environ:
            ranks = int_from_environment(environ, variable, 1)
            if ranks < 1:
                raise ValueError(
                    f"the environment variable {variable} is {ranks}; the ranks on a host "
                    f"are at least 1: set it to their number (torchrun sets it) or unset it"
                )
            return ranks, variable
    if "LOCAL_RANK" in environ and "WORLD_SIZE" in environ:
        world = int_from_environment(environ, "WORLD_SIZE", 1)
        source = "WORLD_SIZE beside LOCAL_RANK, as Lightning's DDP launcher sets them"
    elif group_size is not None:
        world, source = group_size, "the process group's world size"
    else:
        return 1, "no launcher variable"
    if 0 < gpus < world and group_backend != "gloo":
        world, source = gpus, f"{source}, at most the {gpus} GPUs this process sees"
    local_rank = int_from_environment(environ, "LOCAL_RANK", 0)
    return max(1, world, local_rank + 1), source
