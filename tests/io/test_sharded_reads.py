"""Sharded arrays: inner chunks by byte range from cached shard indexes, identical to
zarr's own read, merged where neighbours allow, never a whole shard for a sliver."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import zarr
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import LocalStore, WrapperStore

from insitubatch_nodes import SAMPLE_INDEX_KEY, Loader, build_loader, forget_memory_store
from insitubatch_nodes import memory_store as named_memory_store
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.graph import graph_nodes
from tests.helpers.graphs import build_stage

_names = itertools.count()
INNER_CODECS: dict[str, Any] = {
    "zstd": zarr.codecs.ZstdCodec(level=3),
    "blosc-lz4": zarr.codecs.BloscCodec(cname="lz4", shuffle="shuffle"),
    "none": None,
}


def _fetch_node(root: Any) -> AsyncFetchNode:
    return next(n for n in graph_nodes(root) if isinstance(n, AsyncFetchNode))


def _write_sharded(store: Any, codec: Any, index_location: str = "end") -> np.ndarray:
    group = zarr.open_group(store, mode="w", zarr_format=3)
    shape = (23, 5, 7)  # ragged shards and inner chunks in every dimension
    values = np.random.default_rng(3).integers(-500, 500, shape).astype("int32")
    inner = [zarr.codecs.BytesCodec()] + ([] if codec is None else [codec])
    sharding = zarr.codecs.ShardingCodec(
        chunk_shape=(2, 2, 4), codecs=inner, index_location=index_location
    )
    array = group.create_array(
        "x",
        shape=shape,
        chunks=(6, 4, 8),
        dtype="int32",
        fill_value=7,
        serializer=sharding,
        compressors=None,
    )
    array[...] = values
    array[2:4, 0:2, 0:4] = 7  # one inner chunk never written
    array[12:18] = 7  # whole shards never written
    return array[...]


@pytest.mark.parametrize("codec", sorted(INNER_CODECS))
@pytest.mark.parametrize("index_location", ["end", "start"])
@pytest.mark.parametrize("where", ["memory", "local"])
def test_sharded_reads_match_zarr(
    codec: str, index_location: str, where: str, tmp_path: Path
) -> None:
    name = f"sharded-{next(_names)}"
    store: Any = named_memory_store(name) if where == "memory" else str(tmp_path / "s.zarr")
    url = f"memory://{name}" if where == "memory" else f"file://{tmp_path / 's.zarr'}"
    try:
        truth = _write_sharded(store, INNER_CODECS[codec], index_location=index_location)
        fast_node = build_stage(url, "gather", batch_size=4, fast_path=True)
        fast = [(b[SAMPLE_INDEX_KEY].tobytes(), b["x"].tobytes()) for b in Loader(fast_node)]
        slow_node = build_stage(url, "gather", batch_size=4, fast_path=False)
        slow = [(b[SAMPLE_INDEX_KEY].tobytes(), b["x"].tobytes()) for b in Loader(slow_node)]
    finally:
        forget_memory_store(name)
    assert fast == slow
    for index_bytes, values_bytes in fast:
        index = np.frombuffer(index_bytes, dtype=np.int64)
        assert np.array_equal(np.frombuffer(values_bytes, "int32").reshape(-1, 5, 7), truth[index])
    stats = _fetch_node(fast_node).stats
    assert stats.fast_path_chunks == stats.chunks_read > 0
    assert _fetch_node(slow_node).stats.fast_path_chunks == 0
    # neighbouring inner chunks of a shard come in one request
    assert 0 < stats.range_requests < stats.chunks_read
    assert 0 < stats.shard_index_reads <= 4 * 2 * 1  # shards along (time, y, x)


def test_shard_indexes_are_read_once(tmp_path: Path) -> None:
    _write_sharded(str(tmp_path / "s.zarr"), INNER_CODECS["zstd"])
    loader = Loader(build_stage(f"file://{tmp_path / 's.zarr'}", "gather", batch_size=4))
    list(loader)
    stats = _fetch_node(loader.root).stats
    first = stats.shard_index_reads
    list(loader)
    assert first > 0 and stats.shard_index_reads == first


class RecordingStore(WrapperStore[Store]):
    """Keeps the byte count of every `get` (a real store underneath)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.fetched: list[int] = []

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        found = await self._store.get(key, prototype, byte_range)
        if found is not None and "/c/" in f"/{key}":
            self.fetched.append(len(found))
        return found


def test_a_sliver_of_a_shard_costs_only_the_sliver(tmp_path: Path) -> None:
    samples, inner_bytes = 16, 4 * 128 * 1024  # 512 KiB inner chunks: wider than any gap we bridge
    group = zarr.open_group(str(tmp_path / "big.zarr"), mode="w", zarr_format=3)
    array = group.create_array(
        "x",
        shape=(samples, 128, 1024),
        chunks=(1, 128, 1024),
        shards=(8, 128, 1024),
        dtype="float32",
        compressors=None,
    )
    array[...] = np.random.default_rng(0).standard_normal(array.shape, dtype=np.float32)
    recording = RecordingStore(LocalStore(str(tmp_path / "big.zarr"), read_only=True))
    loader = build_loader(
        recording, split="all", batch_size=2, block_chunks=1, device="cpu", seed=5
    )
    seen = np.concatenate([batch[SAMPLE_INDEX_KEY].numpy() for batch in loader])
    assert sorted(seen.tolist()) == list(range(samples))
    ranged = [n for n in recording.fetched if n > 16 * 8 + 4]  # indexes are 132 bytes
    assert max(ranged) == inner_bytes  # one inner chunk per request, never the shard
    assert sum(ranged) == samples * inner_bytes


@pytest.mark.filterwarnings("ignore:Combining a `sharding_indexed` codec")
def test_nested_sharding_falls_back_to_zarr() -> None:
    name = f"nested-{next(_names)}"
    innermost = zarr.codecs.ShardingCodec(chunk_shape=(1, 2, 4), codecs=[zarr.codecs.BytesCodec()])
    outer = zarr.codecs.ShardingCodec(chunk_shape=(3, 4, 8), codecs=[innermost])
    try:
        group = zarr.open_group(named_memory_store(name), mode="w", zarr_format=3)
        array = group.create_array(
            "x",
            shape=(12, 4, 8),
            chunks=(6, 4, 8),
            dtype="int32",
            serializer=outer,
            compressors=None,
        )
        array[...] = np.arange(array.size, dtype="int32").reshape(array.shape)
        node = build_stage(f"memory://{name}", "gather", batch_size=4)
        batches = list(Loader(node))
    finally:
        forget_memory_store(name)
    assert sum(len(b[SAMPLE_INDEX_KEY]) for b in batches) == 12
    assert _fetch_node(node).stats.fast_path_chunks == 0


@pytest.mark.parametrize("where", ["memory", "local"])
def test_sharded_arrays_reach_the_device_decode_through_the_same_fetch(
    where: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The device reader fetches inner chunks by range as the CPU reader does, and decodes
    them itself: uncompressed inner chunks take its path on the CPU device too (compressed
    ones need nvCOMP, checked against the CPU on CUDA in test_gpu_decode)."""
    name = f"sharded-{next(_names)}"
    store: Any = named_memory_store(name) if where == "memory" else str(tmp_path / "s.zarr")
    url = f"memory://{name}" if where == "memory" else f"file://{tmp_path / 's.zarr'}"
    try:
        truth = _write_sharded(store, None)
        with caplog.at_level("WARNING"):
            node = build_stage(url, "gather", batch_size=4, decode_on=torch.device("cpu"))
            batches = [(b[SAMPLE_INDEX_KEY], b["x"]) for b in Loader(node)]
    finally:
        forget_memory_store(name)
    assert not [r for r in caplog.records if "decoded on the CPU" in r.getMessage()]
    for index, values in batches:
        assert isinstance(values, torch.Tensor)
        assert np.array_equal(values.numpy(), truth[np.asarray(index)])
    assert sum(len(index) for index, _ in batches) == 23
    stats = _fetch_node(node).stats
    assert stats.fast_path_chunks == 0  # no chunk went through the CPU reader
    assert stats.device_decode_calls > 0 and stats.chunks_read > 0
    assert 0 < stats.range_requests < stats.chunks_read
