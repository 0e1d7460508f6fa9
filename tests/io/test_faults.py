"""IO faults never lose or repeat a sample silently, never hang, never leak a thread.

Every fault is injected by `fault_store.FaultyStore` around a real zarr store written by
zarr-python; the expected batches come from the same graph over the same store without
faults.
"""

from __future__ import annotations

import dataclasses
import errno
import functools
import os
import pathlib
import subprocess
import sys
import threading
import time
import zlib
from typing import Any

import numpy as np
import pytest
import torch
import zarr

from insitubatch_nodes import (
    AsyncFetchNode,
    ChunkReadError,
    Loader,
    RetryPolicy,
    ZarrSource,
    build_loader,
)
from insitubatch_nodes.nodes.graph import graph_nodes
from tests.helpers.batches import as_numpy, batch_key, torch_roundtrip
from tests.helpers.fault_store import TRANSIENT_KINDS, Faults, FaultyStore
from tests.helpers.graphs import build_stage
from tests.helpers.paths import child_env
from tests.helpers.threads import our_threads

FAST_RETRY = RetryPolicy(attempts=4, base_delay_s=0.001, max_delay_s=0.01, attempt_timeout_s=10.0)
# For injected hangs: short enough to keep the test quick, long enough for a loaded machine.
HANG_RETRY = dataclasses.replace(FAST_RETRY, attempt_timeout_s=0.3)
CPU = torch.device("cpu")

cpu_loader = functools.partial(build_loader, device="cpu")  # batches read as numpy


def _faulty(url: str, **faults: Any) -> FaultyStore:
    return FaultyStore(ZarrSource.open(url).store, Faults(**faults), name=f"faulty+{url}")


def _fetch_node(loader: Any) -> AsyncFetchNode:
    (node,) = [n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode)]
    return node


def _epoch(loader: Any) -> list[Any]:
    return [batch_key(batch) for batch in loader]


def _assert_no_threads_left(timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while our_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert our_threads() == []


def _assert_every_sample_once(batches: list[Any], truth: dict[str, np.ndarray]) -> None:
    indices = np.concatenate([as_numpy(b["sample_index"]) for b in batches])
    assert sorted(indices.tolist()) == list(range(len(truth["t2m"])))
    for name, values in truth.items():
        got = np.concatenate([as_numpy(b[name]) for b in batches])
        np.testing.assert_array_equal(got, values[indices])


@pytest.mark.parametrize("kind", [*TRANSIENT_KINDS, "mixed"])
def test_transient_faults_are_retried_and_the_epoch_is_unchanged(
    memory_url: Any, kind: str
) -> None:
    url, truth = memory_url()
    expected = _epoch(cpu_loader(url, split="all", batch_size=8, block_chunks=2))
    kinds = ("http-503", "timeout", "connection-reset") if kind == "mixed" else (kind,)
    rate = 0.05 if kind == "hang" else 0.3  # each hang costs one attempt timeout
    store = _faulty(url, transient_rate=rate, kinds=kinds, seed=1)
    policy = HANG_RETRY if kind == "hang" else FAST_RETRY
    loader = cpu_loader(store, split="all", batch_size=8, block_chunks=2, retry=policy)
    batches = list(loader)
    assert [batch_key(b) for b in batches] == expected  # same batches, same order
    _assert_every_sample_once(batches, truth)
    assert store.transient_injected() > 0
    assert _fetch_node(loader).stats.retries == store.transient_injected()
    assert our_threads() == []


@pytest.mark.parametrize("layout", ["sharded", "zarr-decoded"])
def test_transient_faults_on_the_other_read_paths_are_retried(layout: str) -> None:
    """Sharded arrays are read by ranged gets of shard indexes and inner chunks; arrays
    with filters go through zarr's own getitem. Both are retried like plain chunk reads."""
    store = zarr.storage.MemoryStore()
    values = np.arange(48 * 4, dtype="float32").reshape(48, 4)
    group = zarr.open_group(store, mode="w")
    if layout == "sharded":
        array = group.create_array(
            "x", shape=(48, 4), chunks=(2, 4), shards=(8, 4), dtype="float32"
        )
    else:
        array = group.create_array(
            "x",
            shape=(48, 4),
            chunks=(2, 4),
            dtype="float32",
            filters=[zarr.codecs.TransposeCodec(order=(1, 0))],
        )
    array[...] = values
    expected = _epoch(cpu_loader(store, split="all", batch_size=6))
    faulty = FaultyStore(
        store, Faults(transient_rate=0.4, max_transient_per_key=1, seed=3), name=f"faulty+{layout}"
    )
    loader = cpu_loader(faulty, split="all", batch_size=6, retry=FAST_RETRY)
    assert _epoch(loader) == expected
    stats = _fetch_node(loader).stats
    if layout == "sharded":
        assert stats.range_requests > 0 and stats.shard_index_reads > 0
    else:
        assert stats.fast_path_chunks == 0  # really zarr's read path
    assert stats.retries == faulty.transient_injected() > 0


def _fail_first_open_of_some_chunk_files(
    monkeypatch: pytest.MonkeyPatch, root: pathlib.Path
) -> set[str]:
    """Replace `os.open`: the first open of about a third of the chunk (or shard) files
    under `root` fails with EIO (chosen by their path inside it, so the same files on every
    run), as network file systems do now and then. Returns the files that failed."""
    real_open = os.open
    failed: set[str] = set()
    lock = threading.Lock()

    def flaky_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        name = os.fspath(path)
        with lock:
            inside = os.path.relpath(name, root)
            fail = not inside.startswith("..") and "/c/" in inside and name not in failed
            fail = fail and zlib.crc32(inside.encode()) % 3 == 0
            if fail:
                failed.add(name)
        if fail:
            raise OSError(errno.EIO, "Input/output error", name)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", flaky_open)
    return failed


@pytest.mark.parametrize("layout", ["chunked", "sharded"])
def test_transient_errors_of_local_file_reads_are_retried(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, layout: str
) -> None:
    """Local stores read chunk (or shard) files directly; only `os.open` fails here."""
    from tests.helpers.stores import write_store

    if layout == "chunked":
        url, _ = write_store(tmp_path / "local.zarr")
    else:
        url = str(tmp_path / "local.zarr")
        group = zarr.open_group(url, mode="w")
        group.create_array("x", shape=(48, 4), chunks=(2, 4), shards=(8, 4), dtype="float32")[
            ...
        ] = np.arange(48 * 4, dtype="float32").reshape(48, 4)
    expected = _epoch(cpu_loader(url, split="all", batch_size=8))
    failed = _fail_first_open_of_some_chunk_files(monkeypatch, tmp_path)
    loader = cpu_loader(url, split="all", batch_size=8, retry=FAST_RETRY)
    assert _epoch(loader) == expected
    stats = _fetch_node(loader).stats
    local_reads = stats.local_file_reads if layout == "chunked" else stats.range_requests
    assert local_reads > 0 and stats.retries == len(failed) > 0


def _uncompressed(store: Any) -> Any:
    """Uncompressed chunks take the GPU-decode reader's own path on the CPU as well."""
    group = zarr.open_group(store, mode="w")
    array = group.create_array("x", shape=(48, 6), chunks=(2, 3), dtype="float32", compressors=None)
    array[...] = np.arange(48 * 6, dtype="float32").reshape(48, 6)
    return store


def _device_read(store: Any, **options: Any) -> Any:
    return Loader(build_stage(store, "device", batch_size=6, decode_on=CPU, **options))


@pytest.mark.parametrize("where", ["object store", "local files"])
def test_reads_for_gpu_decode_are_retried_like_the_others(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    if where == "object store":
        store = _uncompressed(zarr.storage.MemoryStore())
        expected = _epoch(_device_read(store))
        store = FaultyStore(store, Faults(transient_rate=0.4, max_transient_per_key=1, seed=3))
    else:
        store = _uncompressed(str(tmp_path / "raw.zarr"))
        expected = _epoch(_device_read(store))
        failed = _fail_first_open_of_some_chunk_files(monkeypatch, tmp_path)
    loader = _device_read(store, retry=FAST_RETRY)
    assert _epoch(loader) == expected
    injected = store.transient_injected() if where == "object store" else len(failed)
    stats = _fetch_node(loader).stats
    assert stats.device_decode_calls > 0  # really the GPU-decode reader
    assert stats.retries == injected > 0


def test_a_permanent_error_for_gpu_decode_names_array_key_and_store() -> None:
    store = FaultyStore(
        _uncompressed(zarr.storage.MemoryStore()),
        Faults(permanent=frozenset({"x/c/7/1"})),
        name="faulty-raw",
    )
    with pytest.raises(ChunkReadError) as raised:
        _epoch(_device_read(store, retry=FAST_RETRY))
    assert raised.value.key == "x/c/7/1" and raised.value.attempts == 1
    assert "chunk (7, 1) of variable 'x' (key 'x/c/7/1') from faulty-raw" in str(raised.value)
    _assert_no_threads_left()


@pytest.mark.parametrize("kind", ["refused", "flaky-forever", "hang-forever"])
def test_a_permanent_error_raises_once_naming_array_key_and_url(memory_url: Any, kind: str) -> None:
    url, _ = memory_url()
    key = "t2m/c/7/0/1"
    if kind == "refused":  # not worth retrying: one attempt
        faults = Faults(permanent=frozenset({key}))
        attempts, cause = 1, "PermissionDeniedError: .*403 Forbidden"
    elif kind == "flaky-forever":
        faults = Faults(
            permanent=frozenset({key}),
            permanent_error=ConnectionResetError(errno.ECONNRESET, "Connection reset by peer"),
        )
        attempts, cause = FAST_RETRY.attempts, "ConnectionResetError"
    else:
        faults = Faults(transient_rate=1.0, kinds=("hang",), max_transient_per_key=10**6)
        attempts, cause = FAST_RETRY.attempts, "TimeoutError"
    store = FaultyStore(ZarrSource.open(url).store, faults, name=f"faulty+{url}")
    policy = HANG_RETRY if kind == "hang-forever" else FAST_RETRY
    loader = cpu_loader(store, split="all", batch_size=8, retry=policy)
    started = time.monotonic()
    with pytest.raises(ChunkReadError) as raised:
        for _ in loader:
            pass
    elapsed = time.monotonic() - started
    message = str(raised.value)
    assert "of variable 't2m'" in message
    assert f"from faulty+{url}" in message
    if kind != "hang-forever":  # every chunk hangs there: whichever gives up first is named
        assert f"(key {key!r})" in message and raised.value.key == key
    assert raised.value.attempts == attempts
    if attempts > 1:
        assert f"after {attempts} attempts" in message
    assert __import__("re").search(cause, message)
    assert elapsed < policy.worst_case_s() + 5.0
    assert our_threads() == []  # gone by the time the exception reaches the caller
    # The loader is usable again once the store is: a new epoch over a healthy store works.
    store.faults = Faults()
    assert len(_epoch(loader)) == 11


def test_corrupt_chunk_bytes_raise_an_error_naming_the_key(memory_url: Any) -> None:
    url, _ = memory_url()
    store = _faulty(url, corrupt=frozenset({"u10/c/30/0"}))
    loader = cpu_loader(store, split="all", batch_size=8, retry=FAST_RETRY)
    with pytest.raises(
        ChunkReadError, match=r"chunk \(30, 0\) of variable 'u10' \(key 'u10/c/30/0'\)"
    ):
        list(loader)
    assert store.injected["corrupt"] == 1  # decode failures are not retried
    assert _fetch_node(loader).stats.retries == 0
    assert our_threads() == []


def test_missing_chunk_objects_read_as_the_fill_value() -> None:
    store = zarr.storage.MemoryStore()
    group = zarr.open_group(store, mode="w")
    array = group.create_array("x", shape=(40, 3), chunks=(4, 3), dtype="int32", fill_value=-7)
    array[...] = np.arange(120, dtype="int32").reshape(40, 3)
    faulty = FaultyStore(store, Faults(missing=frozenset({"x/c/2/0", "x/c/9/0"})))
    batches = list(cpu_loader(faulty, split="all", batch_size=5))
    indices = np.concatenate([as_numpy(b["sample_index"]) for b in batches])
    rows = np.concatenate([as_numpy(b["x"]) for b in batches])
    assert sorted(indices.tolist()) == list(range(40))
    gone = ((indices >= 8) & (indices < 12)) | (indices >= 36)
    assert (rows[gone] == -7).all()
    np.testing.assert_array_equal(rows[~gone], array[...][indices[~gone]])
    assert faulty.injected["missing"] == 2


@pytest.mark.parametrize("how", ["break", "raise", "keyboard-interrupt"])
def test_leaving_mid_epoch_under_faults_stops_everything_and_the_next_epoch_is_clean(
    memory_url: Any, how: str
) -> None:
    url, truth = memory_url()
    store = _faulty(url, transient_rate=0.3, latency_s=0.002, seed=5)
    loader = cpu_loader(store, split="all", batch_size=4, retry=FAST_RETRY)
    reference = cpu_loader(url, split="all", batch_size=4)
    _epoch(reference)  # epoch 0 of the reference, to compare epoch 1 with
    error = {"raise": RuntimeError, "keyboard-interrupt": KeyboardInterrupt}.get(how)
    try:
        for i, _ in enumerate(loader):
            if i == 3:
                assert store.inflight > 0 or _fetch_node(loader).stats.chunks_read > 0
                if error is None:
                    break
                raise error("stop")
    except (RuntimeError, KeyboardInterrupt) as err:
        assert error is not None and isinstance(err, error)
    assert our_threads() == []
    batches = list(loader)  # epoch 1, whole
    assert [batch_key(b) for b in batches] == _epoch(reference)
    _assert_every_sample_once(batches, truth)
    assert our_threads() == []


# The pool shuffle with the least pool (P from a 1-byte window: a batch's units plus one),
# so that its reads, like the block order's, run along the epoch.
ORDERS = [{"shuffle": "block"}, {"shuffle": "pool", "shuffle_window": 1}]


@pytest.mark.parametrize("order", ORDERS, ids=["block", "pool"])
def test_resume_after_a_crash_with_reads_in_flight_yields_the_uninterrupted_batches(
    memory_url: Any, order: dict[str, Any]
) -> None:
    url, _ = memory_url()
    expected = _epoch(cpu_loader(url, split="all", batch_size=4, block_chunks=2, **order))
    crash_key = "u10/c/40/0"  # in the last unit: many batches are out before it is read
    store = _faulty(url, latency_s=0.005, permanent=frozenset({crash_key}))
    loader = cpu_loader(
        store, split="all", batch_size=4, block_chunks=2, max_inflight=8, retry=FAST_RETRY, **order
    )
    checkpoints: list[tuple[int, dict[str, Any]]] = []
    with pytest.raises(ChunkReadError, match=crash_key):
        for i, _ in enumerate(loader, start=1):
            checkpoints.append((i, torch_roundtrip(loader.state_dict())))
    assert store.most_inflight > 1  # the crash came while other reads were under way
    assert our_threads() == []
    assert 0 < len(checkpoints) < len(expected)
    for done, state in (checkpoints[0], checkpoints[len(checkpoints) // 2], checkpoints[-1]):
        resumed = cpu_loader(url, split="all", batch_size=4, block_chunks=2, **order)
        resumed.load_state_dict(state)
        assert _epoch(resumed) == expected[done:], f"resumed after {done} batches"


_LEAK_CHECK = """
import gc, pathlib, threading
from tests.helpers.stores import write_store
from tests.helpers.threads import our_threads
from tests.helpers.fault_store import FaultyStore, Faults
from insitubatch_nodes import RetryPolicy, ZarrSource, build_loader

def rss():
    status = pathlib.Path("/proc/self/status").read_text()
    return next(int(l.split()[1]) * 1024 for l in status.splitlines() if l.startswith("VmRSS:"))

url, _ = write_store("memory", {"x": ((256, 64, 64), (8, 64, 64), "float32")})
store = FaultyStore(ZarrSource.open(url).store, Faults(transient_rate=0.2, seed=9))
retry = RetryPolicy(attempts=4, base_delay_s=0.001, max_delay_s=0.01)
loader = build_loader(
    store, split="all", batch_size=16, block_chunks=4, retry=retry, device="cpu"
)
for _ in range(3):  # warm up: allocator pools, zarr's IO thread, import caches
    assert sum(1 for _ in loader) == 16
gc.collect()
before, threads = rss(), threading.active_count()
for _ in range(20):
    assert sum(1 for _ in loader) == 16
    assert our_threads() == [] and threading.active_count() == threads
gc.collect()
print(rss() - before, sum(store.injected.values()))
"""


@pytest.mark.skipif(not pathlib.Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_twenty_epochs_back_to_back_do_not_grow_memory_or_threads() -> None:
    """4 MiB an epoch, read under transient faults (tracebacks of retried errors are a
    classic way to keep buffers alive): a leak of one epoch's blocks would grow RSS by
    4 MiB an epoch, 80 MiB over the run.

    It runs in a fresh process with glibc's malloc limited to 2 arenas: every epoch starts
    new decode threads, and with the default (8 arenas per core) each new thread's arena
    keeps some freed memory, which looks like growth for the first ~30 epochs and then
    levels off (measured: +60 MiB, then flat; flat from the start with 1 arena).
    """
    done = subprocess.run(
        [sys.executable, "-c", _LEAK_CHECK],
        env=child_env(MALLOC_ARENA_MAX="2"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    grown, injected = (int(v) for v in done.stdout.split())
    assert injected > 0
    assert grown < 8 << 20, f"RSS grew by {grown / 2**20:.1f} MiB over 20 epochs"
