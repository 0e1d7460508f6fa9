"""The local chunk cache (`build_loader(cache=...)`): real stores on disk and in the S3
test server, real cache folders, several real processes sharing one."""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr

from insitubatch_nodes import AsyncFetchNode, CacheSpec, build_loader, open_icechunk
from insitubatch_nodes.cli.main import main
from insitubatch_nodes.io.cache.cache_entry import HEADER, HEADER_NBYTES
from insitubatch_nodes.io.cache.cache_segment import TRAILER_NBYTES, Segment
from insitubatch_nodes.io.cache.cache_writes import QueuedWrites
from insitubatch_nodes.io.cache.chunk_cache import LAYOUT, ChunkCache, entry_digest
from insitubatch_nodes.io.cache.segment_writer import PENDING_SUFFIX, SegmentWriter, folder_bytes
from insitubatch_nodes.io.reads.cached_chunks import CachedChunks
from insitubatch_nodes.io.reads.fetch_stats import FetchStats
from insitubatch_nodes.io.reads.object_versions import NoVersions
from insitubatch_nodes.nodes.graph import graph_nodes
from tests.helpers.batches import as_numpy, batch_key
from tests.helpers.paths import HELPERS, child_env
from tests.helpers.s3_server import S3Server
from tests.helpers.stores import write_store
from tests.helpers.threads import our_threads

STORE = {"t2m": ((48, 3, 4), (2, 3, 4), "float32"), "u10": ((48, 2), (4, 2), "int16")}
CHUNKS = 24 + 12  # chunk objects an epoch over the whole store reads
LONG = {"t2m": ((480, 3, 4), (2, 3, 4), "float32")}  # 240 chunks


def _loader(url: str, cache: CacheSpec | None = None, **kwargs: Any) -> Any:
    return build_loader(
        url, split="all", batch_size=4, device="cpu", decode_threads=2, cache=cache, **kwargs
    )


def _epochs(loader: Any, epochs: int = 2) -> tuple[list[list[Any]], list[dict[str, Any]]]:
    keys, stats = [], []
    for _ in range(epochs):
        keys.append([batch_key(b) for b in loader])
        stats.append(loader.stats())
    return keys, stats


def _segments(folder: Path) -> list[Path]:
    return sorted((folder / LAYOUT).glob("*.seg"))


def _pending(folder: Path) -> list[Path]:
    return sorted((folder / LAYOUT).glob(f".*{PENDING_SUFFIX}"))


def _entries(folder: Path) -> set[bytes]:
    """The key digests of every entry in the folder's sealed segments."""
    found: set[bytes] = set()
    for path in _segments(folder):
        segment = Segment.open(path)
        assert segment is not None, path
        found.update(digest for digest, _, _ in segment.records)
    return found


def _budget(folder: Path) -> int:
    return folder_bytes(folder / LAYOUT)


def _all_verify(folder: Path) -> None:
    """Every segment in `folder` is whole and each of its entries checks out under its key."""
    for path in _segments(folder):
        segment = Segment.open(path)
        assert segment is not None, path
        for digest, offset, length in segment.records:
            assert segment.payload(offset, length, digest, 1 << 30) is not None, (path, offset)


def _damage(path: Path, offset: int, data: bytes) -> None:
    """Overwrite bytes of a segment in place (as a failing disk would)."""
    with open(path, "r+b") as file:
        file.seek(offset)
        file.write(data)


def test_batches_are_the_same_with_the_cache_off_cold_and_warm(tmp_path: Path) -> None:
    url, _ = write_store(tmp_path / "s.zarr", STORE)
    reference, _ = _epochs(_loader(url))
    cache = CacheSpec(tmp_path / "cache", 10**8)
    cold, stats = _epochs(_loader(url, cache))
    assert cold == reference
    assert stats[0]["cache_hits"] == 0 and stats[0]["cache_bytes_written"] > 0
    assert stats[1]["cache_hit_ratio"] == 1.0 and stats[1]["cache_bytes_written"] == 0
    assert stats[1]["cache_bytes_served"] > 0
    warm, stats = _epochs(_loader(url, cache))  # a new run on the filled folder
    assert warm == reference
    assert stats[0]["cache_hits"] == CHUNKS
    # resume is exact with a warm cache: a crash after three batches, then a new loader
    interrupted = _loader(url, cache)
    iterator = iter(interrupted)
    for _ in range(3):
        next(iterator)
    state = interrupted.state_dict()
    del iterator
    resumed = _loader(url, cache)
    resumed.load_state_dict(state)
    assert [batch_key(b) for b in resumed] == reference[0][3:]
    folder = tmp_path / "cache"
    assert _pending(folder) == []  # every epoch's entries were sealed at its end
    assert _budget(folder) == sum(p.stat().st_size for p in _segments(folder))
    assert len(_entries(folder)) == CHUNKS
    _all_verify(folder)
    assert our_threads() == []


def test_a_sharded_array_is_cached_by_inner_chunk(tmp_path: Path) -> None:
    store = zarr.storage.LocalStore(str(tmp_path / "s.zarr"))
    group = zarr.open_group(store, mode="w")
    values = np.arange(40 * 6, dtype="float32").reshape(40, 6)
    group.create_array("x", shape=(40, 6), chunks=(2, 3), shards=(8, 6), dtype="float32")[:] = (
        values
    )
    url = f"file://{tmp_path / 's.zarr'}"
    reference, _ = _epochs(_loader(url))
    cached, stats = _epochs(_loader(url, CacheSpec(tmp_path / "cache", 10**8)))
    assert cached == reference
    assert stats[1]["cache_hits"] == 40  # 20 chunk rows x 2 inner chunks
    assert stats[1]["cache_hit_ratio"] == 1.0


def test_hits_never_reach_the_store_or_the_latency_estimate(
    s3_server: S3Server, tmp_path: Path
) -> None:
    url = f"s3://{s3_server.new_bucket()}/data/s.zarr"
    write_store(s3_server.writable_store(url), STORE)
    options = s3_server.options()
    reference, _ = _epochs(_loader(url, storage_options=options))
    keys, stats = _epochs(
        _loader(url, CacheSpec(tmp_path / "cache", 10**8), storage_options=options)
    )
    assert keys == reference
    assert stats[0]["bytes_fetched"] > 0 and stats[0]["cache_hits"] == 0
    # the warm epoch reads nothing through a read slot: no round trip reaches the target
    assert stats[1]["bytes_fetched"] == 0 and stats[1]["reads_in_flight_mean"] == 0
    assert stats[1]["cache_hit_ratio"] == 1.0
    assert "read_latency_p50_s" not in stats[1]


@pytest.mark.parametrize("where", ["disk", "s3"])
@pytest.mark.parametrize("change", ["values", "rechunked"])
def test_a_store_changed_between_runs_is_never_served_old_bytes(
    tmp_path: Path, s3_server: S3Server, where: str, change: str
) -> None:
    if where == "disk":
        url = f"file://{tmp_path / 's.zarr'}"
        target: Any = zarr.storage.LocalStore(str(tmp_path / "s.zarr"))
        options = None
    else:
        url = f"s3://{s3_server.new_bucket()}/data/s.zarr"
        target = s3_server.writable_store(url)
        options = s3_server.options()
    write_store(target, STORE)
    cache = CacheSpec(tmp_path / "cache", 10**8)
    _epochs(_loader(url, cache, storage_options=options), 1)  # fill the cache
    if change == "values":  # rewritten in place: same metadata, same keys, new bytes
        array = zarr.open_array(target, path="t2m", mode="r+")
        new = np.asarray(array[:]) + 1000.0
        array[:] = new
    else:
        group = zarr.open_group(target, mode="a")
        del group["t2m"]
        new = np.random.default_rng(7).random((48, 3, 4), dtype="float32")
        group.create_array("t2m", shape=(48, 3, 4), chunks=(4, 3, 2), dtype="float32")[:] = new
    loader = _loader(url, cache, storage_options=options)
    batches = list(loader)
    indices = np.concatenate([as_numpy(b["sample_index"]) for b in batches])
    np.testing.assert_array_equal(
        np.concatenate([as_numpy(b["t2m"]) for b in batches]), new[indices]
    )
    assert loader.stats()["cache_hits"] == 12  # u10's chunks did not change


def test_a_new_icechunk_snapshot_is_never_served_the_old_ones_bytes(tmp_path: Path) -> None:
    icechunk = pytest.importorskip("icechunk")
    path = tmp_path / "repo"
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    old = np.arange(48 * 3, dtype="float32").reshape(48, 3)
    session = repo.writable_session("main")
    group = zarr.open_group(session.store, mode="w")
    group.create_array("x", shape=(48, 3), chunks=(4, 3), dtype="float32")[...] = old
    first = session.commit("first")
    cache = CacheSpec(tmp_path / "cache", 10**8)

    def read(store: Any) -> tuple[np.ndarray, dict[str, Any]]:
        loader = _loader(store, cache)
        batches = list(loader)
        indices = np.concatenate([as_numpy(b["sample_index"]) for b in batches])
        values = np.empty_like(old)
        values[indices] = np.concatenate([as_numpy(b["x"]) for b in batches])
        return values, loader.stats()

    values, stats = read(open_icechunk(path))
    np.testing.assert_array_equal(values, old)
    assert stats["cache_hits"] == 0 and stats["cache_bytes_written"] > 0
    session = repo.writable_session("main")  # every chunk rewritten, same metadata and keys
    zarr.open_group(session.store, mode="r+")["x"][...] = old + 1000
    session.commit("second")
    values, stats = read(open_icechunk(path))  # the tip: the new snapshot
    np.testing.assert_array_equal(values, old + 1000)
    assert stats["cache_hits"] == 0
    values, stats = read(open_icechunk(path, snapshot_id=first))  # the old one: still cached
    np.testing.assert_array_equal(values, old)
    assert stats["cache_hit_ratio"] == 1.0


def test_damaged_entries_are_never_served_and_are_cached_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url, _ = write_store(tmp_path / "s.zarr", STORE)
    reference, _ = _epochs(_loader(url), 1)
    folder = tmp_path / "cache"
    _epochs(_loader(url, CacheSpec(folder, 10**8)), 1)
    entries = []  # (segment, entry offset, payload length, its header), in every segment
    for path in _segments(folder):
        segment = Segment.open(path)
        assert segment is not None
        for _, offset, length in segment.records:
            head = bytes(segment.view[offset : offset + HEADER_NBYTES])
            entries.append((path, offset, length, head))
        del segment
    (flipped, swapped, zeroed, donor) = entries[:4]
    _damage(flipped[0], flipped[1] + HEADER_NBYTES + 1, b"\xff\x00\xff")  # bits flipped
    _damage(swapped[0], swapped[1], donor[3])  # a whole header, but another chunk's
    _damage(zeroed[0], zeroed[1] + HEADER_NBYTES, bytes(zeroed[2]))  # payload zeroed
    segment_path = _segments(folder)[0]
    # a copy whose index is cut short, and a file that is no segment at all
    cut = segment_path.with_name("99999999999999999999-cut.seg")
    cut.write_bytes(segment_path.read_bytes()[:-5])
    (folder / LAYOUT / "99999999999999999999-junk.seg").write_bytes(b"not a segment")
    keys, stats = _epochs(_loader(url, CacheSpec(folder, 10**8)), 1)
    assert keys == reference  # never a damaged byte in a batch
    assert stats[0]["cache_hits"] == CHUNKS - 3
    assert stats[0]["cache_bytes_written"] > 0  # the three were read and cached again
    assert "damaged" in caplog.text
    assert {p.name for p in _segments(folder)} >= {segment_path.name}
    assert not cut.exists() and not (folder / LAYOUT / "99999999999999999999-junk.seg").exists()
    # a later run takes the newer, whole copies over the damaged ones
    caplog.clear()
    keys, stats = _epochs(_loader(url, CacheSpec(folder, 10**8)), 1)
    assert keys == reference and stats[0]["cache_hit_ratio"] == 1.0
    assert "damaged" not in caplog.text


def test_two_processes_share_one_cache_folder(tmp_path: Path) -> None:
    url, _ = write_store(tmp_path / "s.zarr", STORE)
    folder = tmp_path / "cache"
    command = [sys.executable, str(HELPERS / "cache_run.py"), url, str(folder), str(10**8), "2"]
    env = child_env()
    runs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        for _ in range(2)
    ]
    outputs = []
    for run in runs:
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err.decode()[-2000:]
        outputs.append([json.loads(line) for line in out.decode().splitlines()])
    batches = [[line for line in output if "batch" in line] for output in outputs]
    assert batches[0] == batches[1]
    # both wrote, neither corrupted the other: every segment whole, the budget exact
    _all_verify(folder)
    assert len(_entries(folder)) == CHUNKS and _pending(folder) == []
    assert _budget(folder) == sum(p.stat().st_size for p in _segments(folder))
    _, stats = _epochs(_loader(url, CacheSpec(folder, 10**8)), 1)
    assert stats[0]["cache_hit_ratio"] == 1.0


def test_two_processes_share_one_budget(tmp_path: Path) -> None:
    url, _ = write_store(tmp_path / "s.zarr", LONG)
    whole = tmp_path / "whole"
    _epochs(_loader(url, CacheSpec(whole, 10**8)), 1)
    budget = _budget(whole) // 2
    folder = tmp_path / "cache"
    command = [sys.executable, str(HELPERS / "cache_run.py"), url, str(folder), str(budget), "2"]
    env = child_env()
    runs = [
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        for _ in range(2)
    ]
    for run in runs:
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err.decode()[-2000:]
    assert _pending(folder) == []
    assert 0 < _budget(folder) <= budget  # both wrote, and together stayed within it
    _all_verify(folder)


def test_a_writer_killed_mid_epoch_leaves_a_cache_the_next_run_trusts(tmp_path: Path) -> None:
    url, _ = write_store(tmp_path / "s.zarr", LONG)
    reference, _ = _epochs(_loader(url), 1)
    folder = tmp_path / "cache"
    command = [sys.executable, str(HELPERS / "cache_run.py"), url, str(folder), str(10**8), "1"]
    env = child_env()
    run = subprocess.Popen(
        [*command, "--slow"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert run.stdout is not None
    while not _segments(folder):  # some entries sealed, the rest still to come
        assert run.stdout.readline(), "the run ended before the test could kill it"
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=30)
    written = len(_entries(folder))
    assert 0 < written < 240
    _all_verify(folder)
    abandoned = _pending(folder)  # the segment it was writing (unless it had just sealed)
    for path in abandoned:  # old enough that no writer can be about to lock it
        os.utime(path, (1, 1))
    keys, stats = _epochs(_loader(url, CacheSpec(folder, 10**8)), 1)
    assert keys == reference
    assert stats[0]["cache_hits"] == written
    assert not any(path.exists() for path in abandoned)  # swept, its reserved bytes freed
    assert _pending(folder) == []
    assert _budget(folder) == sum(p.stat().st_size for p in _segments(folder))
    assert len(_entries(folder)) == 240
    _all_verify(folder)


def test_a_killed_writers_pending_segment_is_swept_and_its_space_freed(tmp_path: Path) -> None:
    writer = (
        "import sys, time\n"
        "from insitubatch_nodes.io.cache.chunk_cache import CacheSpec, ChunkCache, entry_digest\n"
        "cache = ChunkCache(CacheSpec(sys.argv[1], 10**6))\n"
        "for i in range(20):\n"
        "    assert cache.admit(entry_digest('k', str(i)), b'x' * 1000)\n"
        "print('written', flush=True)\n"
        "time.sleep(60)\n"
    )
    run = subprocess.Popen(
        [sys.executable, "-c", writer, str(tmp_path)],
        stdout=subprocess.PIPE,
        env=child_env(),
    )
    assert run.stdout is not None and run.stdout.readline() == b"written\n"
    [pending] = _pending(tmp_path)
    reserved = _budget(tmp_path)
    assert reserved >= 20 * 1000
    ChunkCache(CacheSpec(tmp_path, 10**6))  # its writer is alive: left alone
    os.utime(pending, (1, 1))
    ChunkCache(CacheSpec(tmp_path, 10**6))  # alive, however old
    assert pending.exists() and _budget(tmp_path) == reserved
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=30)
    os.utime(pending, (1, 1))
    assert _segments(tmp_path) == []  # never sealed: no reader ever saw its entries
    cache = ChunkCache(CacheSpec(tmp_path, 10**6))  # its writer is gone: swept
    assert not pending.exists() and _budget(tmp_path) == 0
    assert not cache.holds(entry_digest("k", "0"))


def test_a_full_cache_admits_until_its_budget_and_keeps_what_it_holds(tmp_path: Path) -> None:
    url, _ = write_store(tmp_path / "s.zarr", STORE)
    reference, _ = _epochs(_loader(url), 3)
    whole = tmp_path / "whole"
    _epochs(_loader(url, CacheSpec(whole, 10**8)), 1)
    budget = _budget(whole) // 2
    folder = tmp_path / "half"
    keys, stats = _epochs(_loader(url, CacheSpec(folder, budget)), 3)
    assert keys == reference
    assert _budget(folder) <= budget
    held = _entries(folder)
    assert 0.35 <= stats[1]["cache_hit_ratio"] <= 0.65  # about C/S
    assert stats[1]["cache_bytes_written"] == 0  # full: nothing more is admitted
    assert stats[2]["cache_hits"] == stats[1]["cache_hits"]  # and nothing is evicted
    assert _entries(folder) == held


def test_a_read_only_cache_serves_what_it_holds_and_never_writes(tmp_path: Path) -> None:
    url, _ = write_store(tmp_path / "s.zarr", STORE)
    reference, _ = _epochs(_loader(url), 1)
    folder = tmp_path / "cache"
    whole = tmp_path / "whole"
    _epochs(_loader(url, CacheSpec(whole, 10**8)), 1)
    _epochs(_loader(url, CacheSpec(folder, _budget(whole) // 2)), 1)  # prepared, half full
    segment_path = _segments(folder)[0]
    segment = Segment.open(segment_path)
    assert segment is not None
    offset = segment.records[0][1]
    del segment
    _damage(segment_path, offset + HEADER_NBYTES, b"\x01\x02\x03")
    (folder / LAYOUT / "99999999999999999999-junk.seg").write_bytes(b"not a segment")
    before = {p: p.stat().st_mtime_ns for p in (folder / LAYOUT).rglob("*")}
    keys, stats = _epochs(_loader(url, CacheSpec(folder, 10**8, read_only=True)), 1)
    assert keys == reference
    assert 0 < stats[0]["cache_hits"] < CHUNKS and stats[0]["cache_bytes_written"] == 0
    assert {p: p.stat().st_mtime_ns for p in (folder / LAYOUT).rglob("*")} == before
    missing = tmp_path / "never-made"
    keys, _ = _epochs(_loader(url, CacheSpec(missing, 10**8, read_only=True)), 1)
    assert keys == reference and not missing.exists()


def test_no_secret_in_any_cache_path_or_file(s3_server: S3Server, tmp_path: Path) -> None:
    secret = "Sup3rS3cretKeyXyzzy"
    url = f"s3://{s3_server.new_bucket()}/data/s.zarr"
    write_store(s3_server.writable_store(url), STORE)
    options = s3_server.options(secret_access_key=secret)
    folder = tmp_path / "cache"
    _epochs(_loader(url, CacheSpec(folder, 10**8), storage_options=options), 1)
    assert len(_entries(folder)) == CHUNKS
    for path in (folder / LAYOUT).rglob("*"):
        assert secret not in str(path) and "testing" not in str(path)
        if path.is_file():
            assert secret.encode() not in path.read_bytes()


def test_a_remote_stores_entries_are_written_off_the_decode_threads_and_sealed_each_epoch(
    s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"s3://{s3_server.new_bucket()}/data/s.zarr"
    write_store(s3_server.writable_store(url), STORE)
    options = s3_server.options()
    reference, _ = _epochs(_loader(url, storage_options=options))
    writers: set[str] = set()
    append = SegmentWriter.append

    def noting_the_thread(self: SegmentWriter, digest: bytes, payload: Any) -> int:
        writers.add(threading.current_thread().name)
        return append(self, digest, payload)

    monkeypatch.setattr(SegmentWriter, "append", noting_the_thread)
    folder = tmp_path / "cache"
    loader = _loader(url, CacheSpec(folder, 10**8), storage_options=options)
    keys, stats = _epochs(loader)
    assert keys == reference
    assert writers == {"insitubatch-cache-write"}  # not a decode thread
    assert _pending(folder) == []  # the cold epoch's entries, all sealed at its end
    assert len(_entries(folder)) == CHUNKS
    # every entry counted once written (its header, bytes and index record): the segments
    assert stats[0]["cache_bytes_written"] == _budget(folder) - TRAILER_NBYTES * len(
        _segments(folder)
    )
    assert stats[1]["cache_hit_ratio"] == 1.0 and stats[1]["cache_bytes_written"] == 0
    _all_verify(folder)
    loader.close()
    assert [t for t in our_threads() if t.name.endswith("cache-write")] == []


def test_the_write_queue_holds_the_share_of_the_memory_budget_the_plan_gives_it(
    memory_url: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    url, _ = memory_url(STORE)
    made: list[QueuedWrites] = []
    init = QueuedWrites.__init__

    def noted(self: QueuedWrites, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(QueuedWrites, "__init__", noted)
    budget = 1 << 20
    reference, _ = _epochs(_loader(url, memory_budget=budget), 1)
    with caplog.at_level(logging.INFO, logger="insitubatch_nodes.builder"):
        loader = _loader(url, CacheSpec(tmp_path / "cache", 10**8), memory_budget=budget)
    summary = next(r.getMessage() for r in caplog.records if "memory_budget=" in r.getMessage())
    found = re.search(r"cache writes queued up to (\d+)", summary)
    assert found is not None, summary
    share = int(found.group(1))
    assert 0 < share <= budget // 16
    keys, stats = _epochs(loader, 1)
    assert keys == reference  # the same blocks and pool: the share is the read-ahead's
    assert stats[0]["cache_bytes_written"] > 0
    (queued,) = made
    assert queued.max_bytes == share and 0 < queued.most_queued_bytes <= share
    loader.close()


def test_closing_a_loader_seals_its_queued_entries_and_leaves_no_writing_thread(
    memory_url: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    url, _ = memory_url(STORE)
    folder = tmp_path / "cache"
    loader = _loader(url, CacheSpec(folder, 10**8))
    iterator = iter(loader)
    next(iterator)  # mid-epoch
    (fetch,) = [node for node in graph_nodes(loader) if isinstance(node, AsyncFetchNode)]
    assert fetch.context.cache is not None
    gate = threading.Event()
    append = SegmentWriter.append

    def held(self: SegmentWriter, digest: bytes, payload: Any) -> int:
        gate.wait(5)
        return append(self, digest, payload)

    monkeypatch.setattr(SegmentWriter, "append", held)
    digest = entry_digest("queued as the loader closes")
    fetch.context.cache.admit_later(digest, b"stored bytes", lambda written: None)
    closing = threading.Thread(target=loader.close)
    closing.start()
    gate.set()  # the entry is written while (or after) the loader closes
    closing.join(10)
    assert not closing.is_alive()
    assert [t for t in our_threads() if t.name.endswith("cache-write")] == []
    assert digest in _entries(folder) and _pending(folder) == []
    _all_verify(folder)


def test_the_event_loop_runs_on_while_an_epochs_end_waits_for_queued_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    order: list[str] = []
    gate = threading.Event()  # opened by a coroutine of the loop that seals
    append = SegmentWriter.append

    def held(self: SegmentWriter, digest: bytes, payload: Any) -> int:
        gate.wait(5)  # bounded: a seal that blocks the loop would otherwise hang here
        order.append("entry written")
        return append(self, digest, payload)

    monkeypatch.setattr(SegmentWriter, "append", held)
    folder = tmp_path / "cache"
    cache = ChunkCache(CacheSpec(folder, 10**6))
    cached = CachedChunks(cache, lambda: NoVersions("test"), FetchStats(), decode_threads=2)
    digest = entry_digest("an entry")

    async def end_of_epoch() -> None:
        await cached.partition({}, 0)  # a block begins
        cache.admit_later(digest, b"stored bytes", lambda written: None)

        async def meanwhile() -> None:
            order.append("loop ran")
            gate.set()

        await asyncio.gather(cached.finished(), meanwhile())  # the block's end: sealed

    asyncio.run(end_of_epoch())
    assert order == ["loop ran", "entry written"]
    assert _pending(folder) == [] and _entries(folder) == {digest}  # sealed, holding it
    _all_verify(folder)


def test_cache_entries_verify_their_key_length_and_checksum(tmp_path: Path) -> None:
    cache = ChunkCache(CacheSpec(tmp_path, 2000))
    one, two = entry_digest("a", "1"), entry_digest("a", "2")
    scratch = bytearray(HEADER_NBYTES + 200)
    assert cache.admit(one, b"x" * 100) > HEADER_NBYTES + 100
    assert cache.admit(one, b"x" * 100) == 0  # there already
    assert bytes(cache.lookup(one, 100, scratch) or b"") == b"x" * 100  # pending, not sealed
    assert cache.lookup(one, 99, scratch) is None  # longer than a chunk can be
    cache.seal()
    assert bytes(cache.lookup(one, 100, scratch) or b"") == b"x" * 100  # sealed, mapped
    assert cache.lookup(one, 99, scratch) is None
    assert cache.lookup(two, 100, scratch) is None
    [segment] = _segments(tmp_path)
    _damage(segment, 0, HEADER.pack(b"IBCE", 1, 1, 0, 100, 0, two))  # another key's header
    again = ChunkCache(CacheSpec(tmp_path, 2000))
    assert again.lookup(one, 100, scratch) is None and again.lookup(two, 100, scratch) is None
    assert again.admit(one, b"z" * 100) > 0  # dropped, so cached again
    assert again.admit(two, b"z" * 2000) == 0  # past the budget: refused, and full now
    assert again.admit(entry_digest("a", "3"), b"z" * 10) == 0
    again.seal()
    assert bytes(ChunkCache(CacheSpec(tmp_path, 2000)).lookup(one, 100, scratch) or b"") == (
        b"z" * 100
    )  # the newer segment's copy wins


def test_cache_settings_are_checked(tmp_path: Path) -> None:
    assert CacheSpec.from_user({"folder": str(tmp_path), "max_bytes": 10}) == CacheSpec(
        tmp_path, 10
    )
    with pytest.raises(TypeError, match="cache= takes"):
        CacheSpec.from_user(str(tmp_path))
    with pytest.raises((TypeError, ValueError)):
        CacheSpec(tmp_path, -1)


def test_insitubatch_cache_prepares_a_folder_training_reads_read_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = write_store(tmp_path / "s.zarr", STORE)
    reference, _ = _epochs(_loader(url), 1)
    folder = tmp_path / "cache"
    assert main(["cache", url, "--split", "all", "--folder", str(folder), "--max-bytes", "1M"]) == 0
    printed = capsys.readouterr().out
    assert f"{CHUNKS} chunks, 0 already cached" in printed and str(folder) in printed
    keys, stats = _epochs(_loader(url, CacheSpec(folder, 10**6, read_only=True)), 1)
    assert keys == reference and stats[0]["cache_hit_ratio"] == 1.0
    assert main(["cache", url, "--folder", str(folder), "--max-bytes", "lots"]) == 2
    assert "--max-bytes" in capsys.readouterr().err


def test_writers_sealing_while_others_grow_stay_within_the_budget(tmp_path: Path) -> None:
    # a writer renaming its segment into place while another lists the folder to grow
    # must not be missed by that listing (neither name seen): the budget would be passed
    budget = 200_000

    def fill(folder: Path, writer: int) -> None:
        cache = ChunkCache(CacheSpec(folder, budget))
        for i in itertools.count():
            if not cache.admit(entry_digest(str(writer), str(i)), b"x" * 500):
                break
            if i % 3 == 2:
                cache.seal()  # small segments: many renames while the others grow
        cache.seal()

    for trial in range(10):
        folder = tmp_path / str(trial)
        threads = [threading.Thread(target=fill, args=(folder, w)) for w in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert _pending(folder) == []
        assert _budget(folder) <= budget, trial


def test_a_new_memory_store_is_never_served_an_old_ones_bytes(tmp_path: Path) -> None:
    # zarr's MemoryStore is named by its dict's id, which a new store may reuse once the
    # old one is freed: the two must not share cache entries
    cache = CacheSpec(tmp_path / "cache", 10**8)
    old = np.arange(48 * 3, dtype="float32").reshape(48, 3)

    def read(values: np.ndarray, backing: dict[str, Any]) -> np.ndarray:
        store = zarr.storage.MemoryStore(store_dict=backing)
        group = zarr.open_group(store, mode="w")
        group.create_array("x", shape=(48, 3), chunks=(4, 3), dtype="float32")[...] = values
        found = np.empty_like(values)
        for batch in _loader(store, cache):
            found[as_numpy(batch["sample_index"])] = as_numpy(batch["x"])
        return found

    backing: dict[str, Any] = {}
    first = id(backing)
    np.testing.assert_array_equal(read(old, backing), old)
    del backing
    gc.collect()
    kept = []  # dicts allocated until one takes the freed one's place (it usually does)
    for _ in range(100_000):
        backing = {}
        if id(backing) == first:
            break
        kept.append(backing)
    else:
        pytest.skip("no new dict took the freed one's address")
    np.testing.assert_array_equal(read(old + 1000, backing), old + 1000)


def test_an_array_rewritten_in_place_is_seen_next_epoch_when_reading_across_epochs(
    s3_server: S3Server, tmp_path: Path
) -> None:
    # the fetch loop (and its object listing) stays up from epoch to epoch here
    url = f"s3://{s3_server.new_bucket()}/data/s.zarr"
    target = s3_server.writable_store(url)
    write_store(target, LONG)
    loader = _loader(
        url,
        CacheSpec(tmp_path / "cache", 10**8),
        storage_options=s3_server.options(),
        read_across_epochs=True,
    )
    list(loader)  # fills the cache
    array = zarr.open_array(target, path="t2m", mode="r+")
    new = np.asarray(array[:]) + 1000.0
    array[:] = new
    list(loader)  # its first blocks were read ahead before the rewrite
    batches = list(loader)
    indices = np.concatenate([as_numpy(b["sample_index"]) for b in batches])
    np.testing.assert_array_equal(
        np.concatenate([as_numpy(b["t2m"]) for b in batches]), new[indices]
    )


def test_a_writable_icechunk_session_is_never_served_its_earlier_writes(tmp_path: Path) -> None:
    # a writable session reads its uncommitted writes under its base snapshot's id
    icechunk = pytest.importorskip("icechunk")
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(tmp_path / "r")))
    old = np.arange(48 * 3, dtype="float32").reshape(48, 3)
    session = repo.writable_session("main")
    group = zarr.open_group(session.store, mode="w")
    group.create_array("x", shape=(48, 3), chunks=(4, 3), dtype="float32")[...] = old
    session.commit("first")
    cache = CacheSpec(tmp_path / "cache", 10**8)
    store = repo.writable_session("main").store
    for change in (1000, 2000):  # not committed
        zarr.open_group(store, mode="r+")["x"][...] = old + change
        found = np.empty_like(old)
        for batch in _loader(store, cache):
            found[as_numpy(batch["sample_index"])] = as_numpy(batch["x"])
        np.testing.assert_array_equal(found, old + change)


def test_a_failed_listing_logs_no_credentials(caplog: pytest.LogCaptureFixture) -> None:
    """obstore's error for a failed listing repeats the request's URL, userinfo and all; the
    warning that says the chunks go uncached must not."""
    import asyncio
    import datetime

    import obstore.store
    from zarr.storage import ObjectStore

    from insitubatch_nodes.io.reads.object_versions import object_versions
    from insitubatch_nodes.io.reads.retry import RetryPolicy

    no_wait = datetime.timedelta(milliseconds=10)
    client = obstore.store.S3Store(
        "bucket",
        endpoint="http://reader:hunter2pw@127.0.0.1:1",  # nothing listens: the listing fails
        access_key_id="AKIAEXAMPLE",
        secret_access_key="not-a-real-secret",
        region="us-east-1",
        client_options={"allow_http": True, "connect_timeout": "1s", "timeout": "2s"},
        retry_config={
            "max_retries": 0,
            "backoff": {"init_backoff": no_wait, "max_backoff": no_wait, "base": 2},
            "retry_timeout": datetime.timedelta(seconds=1),
        },
    )
    versions = object_versions(
        ObjectStore(client, read_only=True), "s3://bucket", RetryPolicy(attempts=1), lambda: None
    )
    with caplog.at_level("WARNING"):
        asyncio.run(versions.prepare("era5/t2m/"))
    assert "listing 'era5/t2m/' failed" in caplog.text
    assert "hunter2pw" not in caplog.text
