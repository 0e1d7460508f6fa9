"""The fast read path (store.get + numcodecs into the block buffer) gives exactly what
zarr's own read gives, and is used only where it applies."""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import torch
import zarr
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

from insitubatch_nodes import (
    SAMPLE_INDEX_KEY,
    Loader,
    ZarrSource,
    build_loader,
    forget_memory_store,
    memory_store,
)
from insitubatch_nodes.io.reads.local_files import read_file
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.graph import graph_nodes
from tests.helpers.graphs import build_stage

_names = itertools.count()

V3_CODECS: dict[str, Any] = {
    "zstd": zarr.codecs.ZstdCodec(level=3),
    "blosc-lz4": zarr.codecs.BloscCodec(cname="lz4", shuffle="bitshuffle"),
    "gzip": zarr.codecs.GzipCodec(),
    "none": None,
}
V2_CODECS: dict[str, Any] = {
    "zstd": numcodecs.Zstd(),
    "blosc-lz4": numcodecs.Blosc(cname="lz4"),
    "gzip": numcodecs.GZip(),
    "none": None,
}


def _write(zarr_format: int, codec: Any, dtype: str, **extra: Any) -> str:
    name = f"fast-{next(_names)}"
    group = zarr.open_group(memory_store(name), mode="w", zarr_format=zarr_format)
    shape, chunks = (23, 5, 7), (3, 2, 4)  # ragged in every dimension
    values = np.random.default_rng(1).integers(-500, 500, shape).astype(dtype)
    array = group.create_array(
        "x", shape=shape, chunks=chunks, dtype=dtype, compressors=codec, fill_value=9, **extra
    )
    array[...] = values
    array[6:9] = 9  # whole chunks equal to the fill value: not stored
    return name


def _read_epoch(name: str, fast_path: bool) -> tuple[list[tuple[bytes, bytes]], int, int]:
    node = build_stage(f"memory://{name}", "gather", batch_size=4, fast_path=fast_path)
    batches = [(b[SAMPLE_INDEX_KEY].tobytes(), b["x"].tobytes()) for b in Loader(node)]
    fetch = next(n for n in graph_nodes(node) if isinstance(n, AsyncFetchNode))
    return batches, fetch.stats.fast_path_chunks, fetch.stats.local_file_reads


def _check(name: str, expect_fast: bool) -> None:
    try:
        fast, fast_chunks, fast_reads_files = _read_epoch(name, fast_path=True)
        slow, slow_chunks, _ = _read_epoch(name, fast_path=False)
        truth = zarr.open_group(memory_store(name), mode="r")["x"][...]
    finally:
        forget_memory_store(name)
    assert fast == slow
    assert slow_chunks == 0
    assert fast_reads_files == 0  # memory stores go through store.get
    assert (fast_chunks > 0) == expect_fast
    for index_bytes, values_bytes in fast:
        index = np.frombuffer(index_bytes, dtype=np.int64)
        native = truth.dtype.newbyteorder("=")  # batches come in native byte order
        got = np.frombuffer(values_bytes, dtype=native).reshape(len(index), 5, 7)
        assert np.array_equal(got, truth[index])


@pytest.mark.parametrize("codec", sorted(V3_CODECS))
@pytest.mark.parametrize("dtype", ["float32", "int16", "uint8", "float64"])
def test_v3_fast_path_matches_zarr(codec: str, dtype: str) -> None:
    _check(_write(3, V3_CODECS[codec], dtype), expect_fast=True)


@pytest.mark.parametrize("codec", sorted(V2_CODECS))
@pytest.mark.parametrize("dtype", ["<f4", ">i2", ">f8"])
def test_v2_fast_path_matches_zarr(codec: str, dtype: str) -> None:
    _check(_write(2, V2_CODECS[codec], dtype), expect_fast=True)


def test_v3_big_endian_bytes_codec() -> None:
    name = _write(3, None, "int32", serializer=zarr.codecs.BytesCodec(endian="big"))
    _check(name, expect_fast=True)


@pytest.mark.parametrize(
    "layout",
    [
        {"zarr_format": 2, "order": "F"},
        {"zarr_format": 2, "filters": [numcodecs.Delta(dtype="<i4")]},
        {"zarr_format": 3, "filters": [zarr.codecs.TransposeCodec(order=(2, 1, 0))]},
    ],
    ids=["F-order", "v2-filter", "transpose"],
)
def test_other_layouts_fall_back_to_zarr(layout: dict[str, Any]) -> None:
    zarr_format = layout.pop("zarr_format")
    codec = numcodecs.Zstd() if zarr_format == 2 else zarr.codecs.ZstdCodec()
    _check(_write(zarr_format, codec, "<i4", **layout), expect_fast=False)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_local_file_reads_match_zarr_including_missing_chunks(
    zarr_format: int, tmp_path: Any
) -> None:
    path = tmp_path / "local.zarr"
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    values = np.random.default_rng(2).standard_normal((22, 3, 5)).astype("float32")
    codec = zarr.codecs.ZstdCodec() if zarr_format == 3 else numcodecs.Zstd()
    array = group.create_array(
        "x",
        shape=values.shape,
        chunks=(4, 2, 5),
        dtype="float32",
        compressors=codec,
        fill_value=-1,
    )
    array[...] = values
    array[8:12] = -1  # not stored: read back as the fill value
    truth = array[...]
    url = f"file://{path}"
    fast_node = build_stage(url, "gather", batch_size=5, fast_path=True)
    fast = list(Loader(fast_node))
    fetch = next(n for n in graph_nodes(fast_node) if isinstance(n, AsyncFetchNode))
    assert fetch.stats.local_file_reads == fetch.stats.chunks_read > 0  # plain file reads
    slow = list(Loader(build_stage(url, "gather", batch_size=5, fast_path=False)))
    assert [b["x"].tobytes() for b in fast] == [b["x"].tobytes() for b in slow]
    for batch in fast:
        assert np.array_equal(batch["x"], truth[batch[SAMPLE_INDEX_KEY]])


@pytest.mark.parametrize("fast_path", [True, False])
def test_big_endian_store_gives_native_torch_batches(fast_path: bool) -> None:
    name = _write(2, numcodecs.Zstd(), ">f4")
    try:
        truth = zarr.open_group(memory_store(name), mode="r")["x"][...]
        batches = list(Loader(build_stage(f"memory://{name}", "device", fast_path=fast_path)))
    finally:
        forget_memory_store(name)
    assert batches
    for batch in batches:
        assert batch["x"].dtype == torch.float32
        index = batch[SAMPLE_INDEX_KEY].numpy()
        assert np.array_equal(batch["x"].numpy(), truth[index])


@pytest.mark.parametrize(
    "layout",
    [
        {"zarr_format": 2, "order": "F"},
        {"zarr_format": 3, "filters": [zarr.codecs.TransposeCodec(order=(2, 1, 0))]},
    ],
    ids=["F-order", "transpose"],
)
@pytest.mark.filterwarnings("error:Array is unsupported by ZarrsCodecPipeline")
def test_zarrs_pipeline_reads_what_zarr_reads(
    layout: dict[str, Any], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    zarrs = pytest.importorskip("zarrs")  # in the dev extra: CI runs this
    zarr_format = layout.pop("zarr_format")
    codec = numcodecs.Zstd() if zarr_format == 2 else zarr.codecs.ZstdCodec()
    group = zarr.open_group(str(tmp_path / "f.zarr"), mode="w", zarr_format=zarr_format)
    array = group.create_array(
        "x", shape=(23, 5, 7), chunks=(3, 2, 4), dtype="<i4", compressors=codec, **layout
    )
    array[...] = np.random.default_rng(4).integers(-99, 99, array.shape)
    calls = []
    real_read = zarrs.ZarrsCodecPipeline.read

    async def counted_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return await real_read(self, *args, **kwargs)

    monkeypatch.setattr(zarrs.ZarrsCodecPipeline, "read", counted_read)
    url = f"file://{tmp_path / 'f.zarr'}"
    via_zarrs = list(Loader(build_stage(url, "gather", zarr_pipeline="zarrs")))
    assert bool(calls) == (zarr_format == 3)  # zarrs 0.2.3 breaks on v2 F order: zarr reads it
    calls.clear()
    via_zarr = list(Loader(build_stage(url, "gather")))
    assert not calls
    assert [b["x"].tobytes() for b in via_zarrs] == [b["x"].tobytes() for b in via_zarr]
    truth = array[...]
    for batch in via_zarrs:
        assert np.array_equal(batch["x"], truth[batch[SAMPLE_INDEX_KEY]])


def test_an_unknown_zarr_pipeline_is_refused_when_the_graph_is_built() -> None:
    name = _write(3, None, "int16")
    try:
        with pytest.raises(ValueError, match=r"zarr_pipeline='nowhere.Pipeline'.*cannot import"):
            build_stage(f"memory://{name}", "fetch", zarr_pipeline="nowhere.Pipeline")
    finally:
        forget_memory_store(name)


@pytest.mark.parametrize("scratch_size", [None, 1, 99, 100, 101, 4096])
def test_read_file_gives_the_whole_file_whatever_its_scratch(
    tmp_path: Path, scratch_size: int | None
) -> None:
    path = tmp_path / "chunk"
    data = np.random.default_rng(0).integers(0, 256, 100, dtype=np.uint8).tobytes()
    path.write_bytes(data)
    scratch = None if scratch_size is None else bytearray(scratch_size)
    assert bytes(read_file(str(path), scratch)) == data  # type: ignore[arg-type]
    assert read_file(str(tmp_path / "never-written"), scratch) is None


class _MetadataCounting(WrapperStore[Store]):
    """Counts reads of zarr metadata documents."""

    def __init__(self, store: Store, counts: Counter[str] | None = None) -> None:
        super().__init__(store)
        self.counts: Counter[str] = Counter() if counts is None else counts

    def _with_store(self, store: Store) -> _MetadataCounting:
        return _MetadataCounting(store, self.counts)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if key.rsplit("/", 1)[-1] in ("zarr.json", ".zarray", ".zgroup", ".zattrs"):
            self.counts[key] += 1
        return await self._store.get(key, prototype, byte_range)


def test_arrays_are_opened_once_for_all_epochs(memory_url: Any) -> None:
    """Each metadata read is a round trip to an object store: the fetch node opens its
    arrays at the first epoch only, and the batches stay the same."""
    url, _ = memory_url()
    store = _MetadataCounting(ZarrSource.open(url).store)
    loader = build_loader(store, split="all", batch_size=8, device="cpu")
    first = np.concatenate([b[SAMPLE_INDEX_KEY].numpy() for b in loader])
    after_first = sum(store.counts.values())
    assert after_first > 0
    second = np.concatenate([b[SAMPLE_INDEX_KEY].numpy() for b in loader])
    assert sum(store.counts.values()) == after_first
    assert np.array_equal(np.sort(first), np.sort(second))  # the same samples,
    assert not np.array_equal(first, second)  # in the next epoch's order
