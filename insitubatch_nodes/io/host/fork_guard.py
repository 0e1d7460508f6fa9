"""Refuse to run in a forked copy of the process that set the loader up.

obstore's clients (every store the loader opens from a URL) hang forever in a process
forked after the parent used them (developmentseed/obstore#441), and a torch
`DataLoader(num_workers>0)` forks. Even where reads worked, each worker would iterate the
whole graph and yield every sample once per worker. The loader's parallelism is its event
loop, so the fix is not to fork: say so, instead of hanging.
"""

from __future__ import annotations

import os

_object_store_pid: int | None = None  # the process that first opened a store through us

WHAT_TO_DO = (
    "Iterate the loader in the main process: it already reads in parallel on its own event "
    "loop, so wrap it with torch.utils.data.DataLoader(..., num_workers=0) or not at all. "
    "If you need worker processes, build the loader inside each worker, start them with "
    "multiprocessing_context='spawn', and give each worker its own rank/world_size."
)


class ForkedProcessError(RuntimeError):
    """The loader (or its object-store client) is being used in a forked child process."""


def note_object_store_use() -> None:
    global _object_store_pid
    if _object_store_pid is None:
        _object_store_pid = os.getpid()


def check_object_stores_usable() -> None:
    """Raise if this process is a fork of one that already used an object-store client."""
    if _object_store_pid is not None and os.getpid() != _object_store_pid:
        raise ForkedProcessError(
            f"process {os.getpid()} is a fork of process {_object_store_pid}, which already "
            f"used obstore; obstore hangs in forked children (developmentseed/obstore#441) "
            f"(a DataLoader with num_workers > 0 forks). {WHAT_TO_DO}"
        )


def check_same_process(owner_pid: int) -> None:
    """Raise if a loader built in process `owner_pid` is used in another (forked) one."""
    if os.getpid() != owner_pid:
        raise ForkedProcessError(
            f"this loader was built in process {owner_pid} and is being iterated in process "
            f"{os.getpid()}, a fork of it (a DataLoader with num_workers > 0 forks): its "
            f"object-store client would hang there (developmentseed/obstore#441), and every "
            f"worker would yield the whole epoch again. {WHAT_TO_DO}"
        )
