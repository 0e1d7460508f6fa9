"""The decode threads' scheduling priority (`decode_niceness`): lowered where asked (by
default when batches go to a GPU), left as the process's otherwise, refused out of range."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
from pathlib import Path

import pytest
import torch

from insitubatch_nodes import AsyncFetchNode, build_loader
from insitubatch_nodes.io.event_loop import BACKGROUND_NICENESS, EventLoopThread
from insitubatch_nodes.loader import graph_nodes
from tests.conftest import write_store


def _decode_thread_niceness(runtime: EventLoopThread) -> int:
    """The nice value a job in the runtime's decode pool runs at."""

    async def in_the_pool() -> int:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            None, lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        )

    return runtime.submit(in_the_pool()).result(timeout=10)


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own nice value is Linux's")
@pytest.mark.parametrize("niceness", [0, 7])
def test_decode_threads_run_that_much_below_the_process(niceness: int) -> None:
    process = os.getpriority(os.PRIO_PROCESS, 0)
    runtime = EventLoopThread("priority-test", 2, decode_niceness=niceness)
    try:
        assert _decode_thread_niceness(runtime) == min(19, process + niceness)
        assert os.getpriority(os.PRIO_PROCESS, 0) == process  # the caller's is unchanged
    finally:
        runtime.close()


def _fetch_niceness(url: str, **options: object) -> int:
    loader = build_loader(url, split="all", batch_size=4, seed=0, **options)
    try:
        (fetch,) = [n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode)]
        return fetch.context.decode_niceness
    finally:
        loader.close()


def test_the_loader_lowers_decode_only_for_a_gpu_unless_told(tmp_path: Path) -> None:
    url, _ = write_store(tmp_path / "s.zarr")
    assert _fetch_niceness(url, device="cpu") == 0  # CPU training shares cores as equals
    assert _fetch_niceness(url, device="cpu", decode_niceness=5) == 5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_loader_feeding_a_gpu_runs_decode_in_the_background(tmp_path: Path) -> None:
    url, _ = write_store(tmp_path / "s.zarr")
    assert _fetch_niceness(url, device="cuda") == BACKGROUND_NICENESS


@pytest.mark.parametrize("value", [-1, 20])
def test_a_niceness_outside_linux_range_is_refused(tmp_path: Path, value: int) -> None:
    url, _ = write_store(tmp_path / "s.zarr")
    with pytest.raises(ValueError, match="decode_niceness"):
        build_loader(url, split="all", batch_size=4, device="cpu", decode_niceness=value)


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own nice value is Linux's")
def test_a_host_that_refuses_the_lower_priority_still_decodes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Lowering the decode threads is a courtesy to the training thread: where the system
    refuses it (a seccomp profile denying setpriority), the threads run at the process's
    priority and say so once, instead of a decode pool that fails every job."""

    def refused(*_: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "setpriority", refused)
    caplog.set_level(logging.WARNING, logger="insitubatch_nodes")
    process = os.getpriority(os.PRIO_PROCESS, 0)
    runtime = EventLoopThread("priority-test", 2, decode_niceness=BACKGROUND_NICENESS)
    try:
        assert _decode_thread_niceness(runtime) == process
        assert _decode_thread_niceness(runtime) == process
    finally:
        runtime.close()
    warned = [r for r in caplog.records if "priority" in r.getMessage()]
    assert len(warned) == 1 and "Operation not permitted" in warned[0].getMessage()
