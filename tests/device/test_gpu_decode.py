"""GPU-direct decode: which arrays go to the device, the fallback, and the batches.

The codec choice and the whole device-reader plumbing (block tensors, the tensor gather,
the node passing device tensors through, resume) run on the CPU too, with `decode_on`
the CPU: uncompressed arrays take the device path there, compressed ones fall back.
The CUDA tests check nvCOMP's decode against the CPU decode, batch for batch.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import torch
import zarr
import zarr.api.asynchronous

from insitubatch_nodes import (
    AsyncFetchNode,
    Loader,
    PatchSpec,
    SampleSpec,
    ZarrSource,
    build_loader,
    leads,
    window,
)
from insitubatch_nodes.device.device_block_reader import DeviceBlockReader
from insitubatch_nodes.device.device_decoder import BlockBytes, DeviceDecoder, FetchedChunk
from insitubatch_nodes.device.gpu_codecs import DeviceCodec, device_codec, load_nvcomp
from insitubatch_nodes.device.nvcomp_scratch import TORCH_SCRATCH
from insitubatch_nodes.io.reads.chunk_codec import fast_decoder
from insitubatch_nodes.io.reads.chunk_errors import ChunkReadError, CorruptChunkError
from insitubatch_nodes.io.reads.codecs import COMPRESSORS
from insitubatch_nodes.io.reads.fetch_stats import FetchStats
from insitubatch_nodes.io.reads.stored_array import StoredArray
from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.stack_channels import StackChannelsNode
from tests.helpers.batches import batch_key
from tests.helpers.graphs import build_stage
from tests.helpers.resume_check import check_every_cut
from tests.helpers.stores import write_store

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
needs_nvcomp = pytest.mark.skipif(
    not torch.cuda.is_available() or load_nvcomp() is None, reason="needs CUDA and nvCOMP"
)

CODECS: dict[str, Any] = {
    "zstd": lambda: zarr.codecs.ZstdCodec(level=1),
    "gzip": lambda: zarr.codecs.GzipCodec(level=1),
    "blosc": lambda: zarr.codecs.BloscCodec(cname="lz4", shuffle="shuffle"),
    "none": lambda: None,
}


def _write(path: Path, codecs: dict[str, str], *, shape: Any = (50, 6, 7)) -> str:
    """One float32 variable per entry, named after its codec; edge chunks on every axis."""
    group = zarr.open_group(str(path), mode="w")
    rng = np.random.default_rng(1)
    for name, codec in codecs.items():
        inner = CODECS[codec.removeprefix("sharded-")]()
        sharded: dict[str, Any] = {}
        if codec.startswith("sharded-"):  # (4, 4, 5) inner chunks in (8, 4, 10) shards
            codecs_inside = [zarr.codecs.BytesCodec()] + ([] if inner is None else [inner])
            serializer = zarr.codecs.ShardingCodec(chunk_shape=(4, 4, 5), codecs=codecs_inside)
            sharded = dict(chunks=(8, 4, 10), serializer=serializer, compressors=None)
        array = group.create_array(
            name,
            shape=shape,
            dtype="float32",
            fill_value=0,
            **(sharded or dict(chunks=(4, 4, 5), compressors=inner)),
        )
        array[...] = rng.standard_normal(shape).astype(np.float32).cumsum(axis=0)
    return f"file://{path}"


def _codec_of(path: Path, name: str, *, nvcomp: bool) -> DeviceCodec | str:
    async def open_it() -> Any:
        return await zarr.api.asynchronous.open_array(store=str(path), path=name, mode="r")

    return device_codec(fast_decoder(asyncio.run(open_it())), nvcomp_available=nvcomp)


def test_device_codec_choice(tmp_path: Path) -> None:
    _write(tmp_path, {c: c for c in CODECS})
    zstd = _codec_of(tmp_path, "zstd", nvcomp=True)
    assert isinstance(zstd, DeviceCodec) and zstd.algorithm == "Zstd"
    assert "nvCOMP cannot decode 'gzip'" in str(_codec_of(tmp_path, "gzip", nvcomp=True))
    raw = _codec_of(tmp_path, "none", nvcomp=False)
    assert isinstance(raw, DeviceCodec) and raw.algorithm is None
    assert "nvCOMP cannot decode 'blosc'" in str(_codec_of(tmp_path, "blosc", nvcomp=True))
    assert "not installed" in str(_codec_of(tmp_path, "zstd", nvcomp=False))
    assert "not one the GPU decodes" in str(device_codec(None, nvcomp_available=True))


def test_device_reader_on_the_cpu_matches_the_host_reader_and_logs_each_fallback_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = _write(tmp_path, {"raw": "none", "packed": "zstd"})
    expected = [batch_key(b) for b in Loader(build_stage(url, "device", batch_size=6))]
    with caplog.at_level(logging.WARNING):
        node = build_stage(url, "device", batch_size=6, decode_on=torch.device("cpu"))
        loader = Loader(node)
        got = [batch_key(b) for b in loader] + [batch_key(b) for b in loader]
    assert got[: len(expected)] == expected
    fallbacks = [r.getMessage() for r in caplog.records if "decoded on the CPU" in r.getMessage()]
    assert fallbacks == [
        "variable 'packed' is decoded on the CPU: its 'zstd' chunks need nvCOMP, which is not "
        "installed (pip install 'insitubatch-nodes[gpu]')"
    ]  # once, though each epoch opens the store anew


def _fetch_node(node: Any) -> AsyncFetchNode:
    return next(n for n in graph_nodes(node) if isinstance(n, AsyncFetchNode))


def test_blocks_read_ahead_are_decoded_in_fewer_calls_with_the_same_batches(
    tmp_path: Path,
) -> None:
    url = _write(tmp_path, {"raw": "none", "more": "none"}, shape=(96, 6, 7))
    expected = [batch_key(b) for b in Loader(build_stage(url, "device", batch_size=6))]
    node = build_stage(
        url, "device", batch_size=6, prefetch_blocks=6, decode_on=torch.device("cpu")
    )
    assert [batch_key(b) for b in Loader(node)] == expected
    stats = _fetch_node(node).stats
    assert stats.blocks_fetched == 12  # 24 time chunks, 2 per block
    assert 1 <= stats.device_decode_calls <= stats.blocks_fetched
    assert stats.device_decode_ns > 0  # the calls' wall time: the in-loader decode rate
    assert stats.chunks_read == 24 * 2 * 2 * 2  # every chunk of both variables, once


def test_a_damaged_chunk_fails_only_its_own_block_of_a_decode_call(tmp_path: Path) -> None:
    """When blocks decode together and one holds a damaged chunk, the others still get
    their arrays, and the error names the chunk."""
    _write(tmp_path, {"raw": "none"})
    (tmp_path / "raw" / "c" / "5" / "1" / "0").write_bytes(b"not 320 bytes")
    source = ZarrSource.open(str(tmp_path))
    plans = list(Loader(build_stage(str(tmp_path), "plan", block_chunks=2)))

    context = source.read_context(max_inflight=4, decode_threads=2)
    stats = context.stats

    async def decode_all() -> list[Any]:
        reader = DeviceBlockReader(context, torch.device("cpu"))
        blocks = [await reader.read_bytes(plan) for plan in plans]
        return reader.decode_blocks(blocks)

    outcomes = asyncio.run(decode_all())
    assert stats.device_decode_calls == 1 + len(plans)  # together, then block by block
    damaged = [p.block_index for p in plans if any(r.coords == (5, 1, 0) for r in p.reads["raw"])]
    assert len(damaged) == 1 and len(outcomes) == len(plans) > 2
    for plan, outcome in zip(plans, outcomes, strict=True):
        if plan.block_index in damaged:
            assert isinstance(outcome, ChunkReadError)
            assert "chunk (5, 1, 0) of variable 'raw'" in str(outcome)
            continue
        assert isinstance(outcome, dict)
        rows = plan.sample_index
        stored = zarr.open_array(str(tmp_path), path="raw", mode="r")
        for i, row in enumerate(plan.rows["raw"][:, 0]):
            np.testing.assert_array_equal(outcome["raw"][row].numpy(), stored[rows[i]])


SPEC = SampleSpec({"inputs": window(["a", "b"], steps=2, stride=3), "targets": leads(["a"], [1])})
SHAPES = {
    "plain": (None, None),
    "windows": (SPEC, None),
    "patches": (None, PatchSpec((3, 4))),
    "windowed patches": (SPEC, PatchSpec((5, 3))),
    "tiles": (SPEC, PatchSpec((4, 5), "tiles")),
}


def _stacked(
    url: str, spec: SampleSpec | None, patches: PatchSpec | None, **options: Any
) -> StackChannelsNode:
    gathered = build_stage(url, "gather", batch_size=6, spec=spec, patches=patches, **options)
    return StackChannelsNode(gathered, ZarrSource.open(url).layouts, spec)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("stack", [False, True], ids=["fields", "stacked"])
def test_windows_patches_and_stacking_of_device_blocks_give_the_host_batches(
    tmp_path: Path, shape: str, stack: bool
) -> None:
    """The device gather (index_select, or one fancy index per block for patches) and the
    stacking on the device give exactly the host path's batches; "c" is compressed, so its
    blocks come from the CPU and are copied in."""
    url = _write(tmp_path, {"a": "none", "b": "none", "c": "zstd"}, shape=(40, 9, 11))
    spec, patches = SHAPES[shape]
    if stack:
        expected = [batch_key(b) for b in Loader(_stacked(url, spec, patches))]
        node: Any = _stacked(url, spec, patches, decode_on=torch.device("cpu"))
    else:
        host = build_stage(url, "gather", batch_size=6, spec=spec, patches=patches)
        expected = [batch_key(b) for b in Loader(host)]
        node = build_stage(
            url, "gather", batch_size=6, spec=spec, patches=patches, decode_on=torch.device("cpu")
        )
    batches = list(Loader(node))
    assert [batch_key(b) for b in batches] == expected
    assert len(expected) >= 3
    for batch in batches:
        assert all(isinstance(v, torch.Tensor) for k, v in batch.items() if "/" in k or k in "abc")
    assert _fetch_node(node).stats.device_decode_calls > 0


@pytest.mark.parametrize("shape", ["plain", "windowed patches"])
def test_device_reader_resumes_exactly(tmp_path: Path, shape: str) -> None:
    url = _write(tmp_path, {"a": "none", "b": "zstd"}, shape=(40, 9, 11))
    spec, patches = SHAPES[shape]
    check_every_cut(
        lambda: build_stage(
            url, "device", batch_size=7, spec=spec, patches=patches, decode_on=torch.device("cpu")
        )
    )


def test_gpu_decode_needs_a_cuda_device(tmp_path: Path) -> None:
    url = _write(tmp_path, {"raw": "none"})
    with pytest.raises(ValueError, match="decode='gpu' needs a CUDA device"):
        build_loader(url, split="all", device="cpu", decode="gpu")
    with pytest.raises(ValueError, match="decode must be 'cpu' or 'gpu'"):
        build_loader(url, split="all", decode="tpu")


@needs_nvcomp
@pytest.mark.parametrize("codec", ["zstd", "none", "blosc", "gzip", "sharded-zstd", "sharded-none"])
def test_gpu_decode_yields_the_cpu_batches(
    tmp_path: Path, codec: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = _write(tmp_path, {"a": codec, "b": codec})
    on_cpu = [batch_key(b) for b in build_loader(url, split="all", batch_size=6, device="cuda")]
    with caplog.at_level(logging.WARNING):
        loader = build_loader(url, split="all", batch_size=6, device="cuda", decode="gpu")
        batches = list(loader)
    for batch in batches:
        assert batch["a"].device.type == "cuda" and batch["sample_index"].device.type == "cpu"
    assert [batch_key(b) for b in batches] == on_cpu
    fallbacks = [r for r in caplog.records if "decoded on the CPU" in r.getMessage()]
    assert len(fallbacks) == (2 if codec in ("blosc", "gzip") else 0)  # sharded ones too


@needs_nvcomp
def test_nvcomp_takes_its_scratch_from_torchs_pool(tmp_path: Path) -> None:
    """Scratch nvCOMP allocates itself is freed with a device-wide wait, which stalls the
    training step; from torch's pool it is reused stream-ordered and counted."""
    url = _write(tmp_path, {"a": "zstd"}, shape=(64, 33, 20))
    on_cpu = [batch_key(b) for b in build_loader(url, split="all", batch_size=6, device="cuda")]
    asked_before = TORCH_SCRATCH.requests
    batches = list(build_loader(url, split="all", batch_size=6, device="cuda", decode="gpu"))
    assert [batch_key(b) for b in batches] == on_cpu
    assert TORCH_SCRATCH.requests > asked_before and TORCH_SCRATCH.bytes_requested > 0


@needs_nvcomp
@pytest.mark.parametrize("shape", ["windows", "windowed patches", "tiles"])
def test_gpu_decode_of_stacked_windows_and_patches_yields_the_cpu_batches(
    tmp_path: Path, shape: str
) -> None:
    url = _write(tmp_path, {"a": "zstd", "b": "none"}, shape=(40, 9, 11))
    spec, patches = SHAPES[shape]
    options: dict[str, Any] = dict(
        split="all", batch_size=6, device="cuda", spec=spec, patches=patches, stack=True
    )
    on_cpu = [batch_key(b) for b in build_loader(url, **options)]
    batches = list(build_loader(url, decode="gpu", **options))
    assert all(b["inputs"].is_cuda for b in batches)
    assert [batch_key(b) for b in batches] == on_cpu


@needs_nvcomp
def test_gpu_decode_leaves_the_host_decoder_idle_and_keeps_the_consumer_stream_order(
    tmp_path: Path,
) -> None:
    url = _write(tmp_path, {"a": "zstd"}, shape=(64, 33, 20))
    plain = build_stage(url, "device", batch_size=5, device="cuda")
    expected = [b["a"].double().sum().item() for b in Loader(plain)]
    node = build_stage(url, "device", batch_size=5, device="cuda", decode_on=torch.device("cuda"))
    consumer = torch.cuda.Stream()
    sums = []
    with torch.cuda.stream(consumer):
        for batch in Loader(node):
            torch.cuda._sleep(1_000_000)
            sums.append(batch["a"].double().sum())
    torch.cuda.synchronize()
    assert [s.item() for s in sums] == pytest.approx(expected, rel=0, abs=0)
    fetch = node.source.source.source  # type: ignore[attr-defined]
    assert fetch.stats.chunks_read > 0 and fetch.stats.fast_path_chunks == 0


def _damage(path: Path, name: str, damage: str) -> tuple[str, tuple[int, ...]]:
    """Damage chunk (5, 1, 0) of array `name` (written by `_write`); its key and coords."""
    import numcodecs

    chunk = path / name / "c" / "5" / "1" / "0"
    stored = chunk.read_bytes()
    rows = np.arange(2 * 4 * 5, dtype=np.float32).reshape(2, 4, 5)  # half a chunk
    if damage == "fewer bytes":
        forged = bytes(numcodecs.Zstd().encode(rows)) if name != "none" else rows.tobytes()
    elif damage == "truncated":
        forged = stored[: len(stored) // 2]
    else:  # a second frame after the first
        forged = stored + stored
    chunk.write_bytes(forged)
    return f"{name}/c/5/1/0", (5, 1, 0)


@pytest.mark.parametrize("damage", ["fewer bytes", "truncated", "second frame"])
def test_the_device_reader_verifies_each_chunk_before_the_device_sees_it(
    tmp_path: Path, damage: str
) -> None:
    """On the CPU, uncompressed chunks take the device reader's own path: a chunk of the
    wrong length never reaches the block (on CUDA the same check guards nvCOMP)."""
    url = _write(tmp_path, {"none": "none"})
    key, coords = _damage(tmp_path, "none", damage)
    node = build_stage(url, "device", batch_size=6, decode_on=torch.device("cpu"))
    with pytest.raises(CorruptChunkError) as raised:
        list(Loader(node))
    assert raised.value.key == key and raised.value.coords == coords
    assert raised.value.expected_nbytes == 4 * 4 * 5 * 4


def test_zstd_frames_with_checksums_are_decoded_on_the_cpu(tmp_path: Path) -> None:
    group = zarr.open_group(str(tmp_path), mode="w")
    group.create_array(
        "x", shape=(8, 4), dtype="f4", compressors=zarr.codecs.ZstdCodec(checksum=True)
    )
    chosen = _codec_of(tmp_path, "x", nvcomp=True)
    assert "content checksums, which nvCOMP does not verify" in str(chosen)


@needs_nvcomp
@pytest.mark.parametrize("damage", ["fewer bytes", "truncated", "second frame"])
def test_gpu_decode_refuses_a_damaged_zstd_chunk(tmp_path: Path, damage: str) -> None:
    url = _write(tmp_path, {"zstd": "zstd"})
    key, coords = _damage(tmp_path, "zstd", damage)
    with pytest.raises(CorruptChunkError) as raised:
        list(build_loader(url, split="all", batch_size=6, device="cuda", decode="gpu"))
    assert raised.value.key == key and raised.value.coords == coords


@needs_nvcomp
def test_valid_zstd_chunks_nvcomp_cannot_be_given_checked_are_decoded_on_the_host(
    tmp_path: Path,
) -> None:
    """A chunk of two zstd frames (as seekable or parallel writers make) is valid zarr,
    but nvCOMP would decode only a checked single frame: the host decodes that chunk."""
    import numcodecs

    url = _write(tmp_path, {"zstd": "zstd"})
    chunk = tmp_path / "zstd" / "c" / "5" / "1" / "0"
    stored = np.frombuffer(numcodecs.Zstd().decode(chunk.read_bytes()), np.float32)
    whole = stored.reshape(4, 4, 5)  # an edge chunk, stored padded
    halves = [bytes(numcodecs.Zstd().encode(whole[i : i + 2].copy())) for i in (0, 2)]
    chunk.write_bytes(halves[0] + halves[1])
    on_cpu = [batch_key(b) for b in build_loader(url, split="all", batch_size=6, device="cuda")]
    loader = build_loader(url, split="all", batch_size=6, device="cuda", decode="gpu")
    assert [batch_key(b) for b in loader] == on_cpu
    assert _fetch_node(loader.root).stats.host_decoded_chunks == 1


def test_partly_kept_chunks_of_different_dtypes_share_a_scratch_round(tmp_path: Path) -> None:
    """On the fine grid (chunks of 7 and 5 steps, units of 5) and its revisits most chunks
    are partly kept, and one decode round holds pieces of a float32 chunk of 84 bytes and
    an int16 chunk of 10: each piece's scratch must start where its dtype can be viewed
    (a 10-byte slice before a float32 one could not). Batches equal the host reader's."""
    url, truth = write_store(
        tmp_path / "s.zarr",
        {"a": ((50, 3), (7, 3), "float32"), "b": ((50, 1), (5, 1), "int16")},
        compressor="none",
    )
    for unit_length in (5, 1):
        loader = Loader(
            build_stage(url, "gather", unit_length=unit_length, decode_on=torch.device("cpu"))
        )
        drawn = []
        for batch in loader:
            index = np.asarray(batch["sample_index"])
            for name, values in truth.items():
                assert np.array_equal(np.asarray(batch[name]), values[index]), name
            drawn.append(index)
        assert np.array_equal(np.sort(np.concatenate(drawn)), np.arange(50))


def test_zstd_chunks_nvcomp_may_not_take_are_decoded_on_the_host_not_refused(
    tmp_path: Path,
) -> None:
    """A skippable frame before a chunk's zstd frame is valid zarr (libzstd passes over it,
    and so do zarr and the CPU reader), but nvCOMP must not be given it: the device decoder
    decodes such chunks on the host, as it does chunks of several frames, rather than
    refusing them as damaged. Runs on the CPU: no chunk here reaches nvCOMP."""
    url = _write(tmp_path, {"zstd": "zstd"})
    skippable = struct.pack("<II", 0x184D2A50, 4) + b"note"
    chunks = [c for c in (tmp_path / "zstd" / "c").rglob("*") if c.is_file()]
    for chunk in chunks:
        chunk.write_bytes(skippable + chunk.read_bytes())
    codec = _codec_of(tmp_path, "zstd", nvcomp=True)
    assert isinstance(codec, DeviceCodec) and codec.algorithm == "Zstd"
    opened = asyncio.run(zarr.api.asynchronous.open_array(store=str(tmp_path), path="zstd"))
    stats = FetchStats()
    decoder = DeviceDecoder(
        {"zstd": codec},
        {"zstd": StoredArray("zstd", opened, codec.decoder)},
        ZarrSource.open(url).layouts,
        torch.device("cpu"),
        url,
        stats,
    )
    plans = list(Loader(build_stage(url, "plan", block_chunks=2)))
    blocks = []
    for plan in plans:
        payloads = []
        for read in plan.reads["zstd"]:
            stored = (tmp_path / "zstd" / "c").joinpath(*map(str, read.coords)).read_bytes()
            held = torch.from_numpy(np.frombuffer(stored, dtype=np.uint8).copy())
            payloads.append(FetchedChunk("zstd", read, held))
        blocks.append(BlockBytes(plan.buffer_rows, payloads, {}))
    outcomes = decoder.decode_blocks(blocks)
    truth = zarr.open_array(str(tmp_path), path="zstd", mode="r")[...]
    for plan, outcome in zip(plans, outcomes, strict=True):
        assert isinstance(outcome, dict), outcome
        for i, row in enumerate(plan.rows["zstd"][:, 0]):
            np.testing.assert_array_equal(outcome["zstd"][row].numpy(), truth[plan.sample_index[i]])
    assert stats.host_decoded_chunks == sum(len(p.reads["zstd"]) for p in plans) == len(chunks)


def test_the_gpu_codec_choice_is_the_codec_tables(tmp_path: Path) -> None:
    """`device_codec` answers from the codec table, by the compressor's registered name:
    nvCOMP's algorithm and the table's check of what it may take where the table names
    one, the CPU for the others, and, for a codec the table does not know, why."""
    group = zarr.open_group(str(tmp_path), mode="w", zarr_format=2)
    for name in [*COMPRESSORS, "bz2"]:
        compressor = numcodecs.get_codec({"id": name})
        group.create_array(name, shape=(8, 4), dtype="f4", compressors=compressor)
    for name, kind in COMPRESSORS.items():
        chosen = _codec_of(tmp_path, name, nvcomp=True)
        if kind.nvcomp is None:
            assert chosen == f"nvCOMP cannot decode {name!r} chunks"
            continue
        assert isinstance(chosen, DeviceCodec) and chosen.algorithm == kind.nvcomp.algorithm
        assert chosen.takes is kind.nvcomp.takes
    unknown = str(_codec_of(tmp_path, "bz2", nvcomp=True))
    assert "not one the GPU decodes: codec 'bz2' is not one the library decodes itself" in unknown
