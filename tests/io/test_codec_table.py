"""The codec table (`io/reads/codecs.py`) covers every compressor the library decodes: each
one, in Zarr v2 and in v3 wherever zarr registers a v3 codec of its name, alone, followed
by a crc32c and as the inner chunks of shards, reads through the loader exactly what
zarr's own read gives, decoded by the library. An array whose codec the table does not
know, or whose layout the library does not read itself, gives zarr's values through zarr,
and the reason names what it does not decode. Every store is written by zarr-python."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import zarr
import zarr.api.asynchronous
import zarr.registry

from insitubatch_nodes import SAMPLE_INDEX_KEY, Loader
from insitubatch_nodes.io.reads.codecs import COMPRESSORS, ZarrDecodes
from insitubatch_nodes.io.reads.stored_array import StoredArray, stored_array
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.graph import graph_nodes
from tests.helpers.graphs import build_stage

SHAPE, CHUNKS, SHARDS = (23, 5, 7), (3, 2, 4), (6, 4, 8)  # ragged in every dimension
_names = itertools.count()


def _registered_in_v3(name: str) -> bool:
    try:
        zarr.registry.get_codec_class(name)
    except KeyError:
        return False
    return True


V3_NAMES = sorted(name for name, kind in COMPRESSORS.items() if kind.from_v3 is not None)


def _write(tmp_path: Path, zarr_format: int, **options: Any) -> tuple[Path, np.ndarray]:
    """One int32 array "x" of compressible values, some chunks never written."""
    path = tmp_path / f"s{next(_names)}.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    values = np.random.default_rng(3).integers(-50, 50, SHAPE).astype("<i4")
    array = group.create_array("x", shape=SHAPE, dtype="<i4", fill_value=7, **options)
    array[...] = values
    array[6:12] = 7  # whole chunks equal to the fill value: not stored
    return path, array[...]


def _read(path: Path) -> tuple[StoredArray | ZarrDecodes, int]:
    """How the library reads "x" (or why zarr does), after checking that every batch the
    loader draws holds zarr's own values; and the chunks the library decoded itself."""
    opened = asyncio.run(zarr.api.asynchronous.open_array(store=str(path), path="x", mode="r"))
    truth = zarr.open_array(str(path), path="x", mode="r")[...]
    node = build_stage(str(path), "gather", batch_size=4)
    drawn = []
    for batch in Loader(node):
        index = np.asarray(batch[SAMPLE_INDEX_KEY])
        np.testing.assert_array_equal(np.asarray(batch["x"]), truth[index])
        drawn.append(index)
    assert np.array_equal(np.sort(np.concatenate(drawn)), np.arange(SHAPE[0]))
    fetch = next(n for n in graph_nodes(node) if isinstance(n, AsyncFetchNode))
    return stored_array("x", opened), fetch.stats.fast_path_chunks


def test_a_compressor_has_a_v3_form_exactly_where_zarr_registers_its_name() -> None:
    """Else a v3 array zarr writes with it would silently take the slow path, or the table
    would make a decoder for a codec zarr does not write."""
    for name, kind in COMPRESSORS.items():
        assert (kind.from_v3 is not None) == _registered_in_v3(name), name


@pytest.mark.parametrize("name", sorted(COMPRESSORS))
def test_every_compressor_of_the_table_reads_zarrs_values_in_zarr_v2(
    tmp_path: Path, name: str
) -> None:
    path, _ = _write(tmp_path, 2, chunks=CHUNKS, compressors=numcodecs.get_codec({"id": name}))
    stored, decoded_here = _read(path)
    assert isinstance(stored, StoredArray) and decoded_here > 0
    assert stored.decoder.compressor is not None
    assert stored.decoder.compressor.kind is COMPRESSORS[name]


@pytest.mark.parametrize("layout", ["alone", "crc32c", "sharded", "sharded+crc32c"])
@pytest.mark.parametrize("name", V3_NAMES)
def test_every_compressor_of_the_table_reads_zarrs_values_in_zarr_v3(
    tmp_path: Path, name: str, layout: str
) -> None:
    codecs = [zarr.registry.get_codec_class(name)()]
    if "crc32c" in layout:
        codecs.append(zarr.codecs.Crc32cCodec())
    shards = {"shards": SHARDS} if "sharded" in layout else {}
    path, _ = _write(tmp_path, 3, chunks=CHUNKS, compressors=codecs, **shards)
    stored, decoded_here = _read(path)
    assert isinstance(stored, StoredArray) and decoded_here > 0
    assert (stored.shards is not None) == bool(shards)
    assert stored.decoder.checksum == ("crc32c" in layout)
    assert stored.decoder.compressor is not None
    assert stored.decoder.compressor.kind is COMPRESSORS[name]


UNKNOWN: dict[str, tuple[int, Any, str]] = {
    "v2-bz2": (2, lambda: numcodecs.BZ2(level=1), "bz2"),
    "v2-lzma": (2, lambda: numcodecs.LZMA(preset=1), "lzma"),
    "v3-numcodecs.bz2": (3, lambda: zarr.codecs.numcodecs.BZ2(level=1), "numcodecs.bz2"),
}


@pytest.mark.filterwarnings("ignore:Numcodecs codecs are not in the Zarr version 3")
@pytest.mark.parametrize(
    ("case", "sharded"),
    [
        ("v2-bz2", False),
        ("v2-lzma", False),
        ("v3-numcodecs.bz2", False),
        ("v3-numcodecs.bz2", True),
    ],
    ids=["v2-bz2", "v2-lzma", "v3-numcodecs.bz2", "v3-numcodecs.bz2-sharded"],
)
def test_a_compressor_the_table_does_not_know_is_read_through_zarr(
    tmp_path: Path, case: str, sharded: bool
) -> None:
    zarr_format, compressor, name = UNKNOWN[case]
    shards = {"shards": SHARDS} if sharded else {}
    path, _ = _write(tmp_path, zarr_format, chunks=CHUNKS, compressors=compressor(), **shards)
    stored, decoded_here = _read(path)
    assert stored == ZarrDecodes(f"codec {name!r} is not one the library decodes itself")
    assert decoded_here == 0


@pytest.mark.filterwarnings("ignore:Combining a `sharding_indexed` codec")
@pytest.mark.parametrize(
    ("zarr_format", "options", "reason"),
    [
        (2, {"filters": [numcodecs.Delta(dtype="<i4")]}, "its filters (delta) are zarr's"),
        (2, {"order": "F"}, "its chunks are stored in F order"),
        (
            3,
            {"filters": [zarr.codecs.TransposeCodec(order=(2, 1, 0))]},
            "codec 'transpose' is not one the library decodes itself",
        ),
        (
            3,
            {"compressors": [zarr.codecs.ZstdCodec(), zarr.codecs.GzipCodec()]},
            "its chunks pass through bytes then zstd then gzip",
        ),
        (
            3,
            {
                "serializer": zarr.codecs.ShardingCodec(
                    chunk_shape=(3, 1, 2),
                    codecs=[zarr.codecs.ShardingCodec(chunk_shape=(1, 1, 2))],
                ),
                "compressors": None,
            },
            "its shards' chunks are sharded again",
        ),
    ],
    ids=["v2-filter", "F-order", "transpose", "two-compressors", "nested-sharding"],
)
def test_a_layout_the_library_does_not_read_is_read_through_zarr_and_says_why(
    tmp_path: Path, zarr_format: int, options: dict[str, Any], reason: str
) -> None:
    path, _ = _write(tmp_path, zarr_format, chunks=CHUNKS, **options)
    stored, decoded_here = _read(path)
    assert isinstance(stored, ZarrDecodes) and stored.reason.startswith(reason), stored
    assert decoded_here == 0
