"""Stores damaged the way real archives get damaged never yield wrong values.

Each store is written by zarr-python (Zarr v2 and v3; zstd, blosc-lz4, lz4, gzip, no
compressor; plain and sharded), then damaged on disk or in a bucket of the S3 test server:
one chunk replaced by a valid stream of fewer or more bytes, cut short, a byte flipped
(where the codec can detect it), shard index entries swapped, emptied or pointing past the
shard, the dtype edited in the metadata. Reading must stop with a `ChunkReadError` (a
`CorruptChunkError` wherever the library decodes the chunk itself) naming the variable,
the chunk and its key, and no batch before it may hold a row of the damaged chunk.
"""

from __future__ import annotations

import itertools
import json
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import obstore
import obstore.store
import pytest
import zarr
import zarr.codecs.numcodecs

from insitubatch_nodes import ChunkReadError, CorruptChunkError, build_loader
from insitubatch_nodes.io.reads.shard_index import EMPTY
from tests.helpers.batches import as_numpy
from tests.helpers.threads import our_threads

SHAPE, CHUNKS = (22, 6, 8), (4, 6, 8)  # float32: 768 bytes a chunk; the last one ragged
DAMAGED = (2, 0, 0)  # rows 8..11
_names = itertools.count()


@dataclass(frozen=True)
class Codec:
    """How zarr-python writes the chunks (v2 and v3), and the numcodecs codec that writes
    the same stream (to forge valid streams of the wrong size)."""

    v2: Any
    v3: Any
    stream: Any
    flip_detected: bool  # a flipped byte fails a checksum (or the stream's own framing)
    v3_fast_path: bool = True  # v3 arrays decoded by the library (else by zarr's own read)


CODECS: dict[str, Codec] = {
    "zstd": Codec(
        numcodecs.Zstd(checksum=True),
        zarr.codecs.ZstdCodec(checksum=True),
        numcodecs.Zstd(checksum=True),
        flip_detected=True,
    ),
    "blosc-lz4": Codec(
        numcodecs.Blosc(cname="lz4"),
        zarr.codecs.BloscCodec(cname="lz4", shuffle="shuffle"),
        numcodecs.Blosc(cname="lz4"),
        flip_detected=False,
    ),
    "lz4": Codec(
        numcodecs.LZ4(),
        zarr.codecs.numcodecs.LZ4(),
        numcodecs.LZ4(),
        flip_detected=False,
        v3_fast_path=False,  # numcodecs' v3 wrapper: zarr decodes it
    ),
    "gzip": Codec(numcodecs.GZip(), zarr.codecs.GzipCodec(), numcodecs.GZip(), flip_detected=True),
    "none": Codec(None, None, None, flip_detected=False),
}
DAMAGES = ("fewer bytes", "more bytes", "truncated", "flipped byte")


def _cases() -> list[Any]:
    cases = []
    for fmt, (name, codec), damage in itertools.product((2, 3), CODECS.items(), DAMAGES):
        if damage == "flipped byte" and not codec.flip_detected:
            continue
        cases.append(pytest.param(fmt, name, damage, id=f"v{fmt}-{name}-{damage}"))
    cases += [
        pytest.param(3, "zstd+crc32c", damage, id=f"v3-zstd+crc32c-{damage}") for damage in DAMAGES
    ]
    return cases


class Place:
    """Where the store lives: a directory, or a bucket on the S3 test server."""

    def __init__(self, kind: str, tmp_path: Path, s3: Any) -> None:
        self.kind = kind
        name = f"store-{next(_names)}.zarr"
        if kind == "disk":
            self.url = str(tmp_path / name)
            self.options: dict[str, Any] | None = None
            self.writable: Any = zarr.storage.LocalStore(self.url)
        else:
            self.url = f"s3://{s3.new_bucket()}/{name}"
            self.options = s3.options()
            self.writable = s3.writable_store(self.url)
            self._raw = obstore.store.from_url(self.url, **self.options)
        self._root = Path(self.url)

    def read(self, key: str) -> bytes:
        if self.kind == "disk":
            return (self._root / key).read_bytes()
        return bytes(obstore.get(self._raw, key).bytes())

    def write(self, key: str, data: bytes) -> None:
        if self.kind == "disk":
            (self._root / key).write_bytes(data)
        else:
            obstore.put(self._raw, key, data)

    def loader(self, **options: Any) -> Any:
        return build_loader(
            self.url,
            split="all",
            batch_size=4,
            block_chunks=1,
            device="cpu",
            storage_options=self.options,
            **options,
        )


@pytest.fixture(params=["disk", "s3"])
def place(request: pytest.FixtureRequest, tmp_path: Path, s3_server: Any) -> Place:
    return Place(request.param, tmp_path, s3_server)


def _values() -> np.ndarray:
    return np.random.default_rng(5).standard_normal(SHAPE).astype("float32")


def _write(place: Place, fmt: int, codec_name: str, **array_options: Any) -> zarr.Array:
    group = zarr.open_group(place.writable, mode="w", zarr_format=fmt)
    if codec_name == "zstd+crc32c":
        array_options["compressors"] = [zarr.codecs.ZstdCodec(), zarr.codecs.Crc32cCodec()]
    elif "compressors" not in array_options and "serializer" not in array_options:
        codec = CODECS[codec_name]
        array_options["compressors"] = codec.v2 if fmt == 2 else codec.v3
    array = group.create_array("x", shape=SHAPE, chunks=CHUNKS, dtype="float32", **array_options)
    array[...] = _values()
    return array


def _forged(codec_name: str, stored: bytes, damage: str) -> bytes:
    """The damaged stream for a chunk whose good stream is `stored`."""
    rows = np.random.default_rng(9).standard_normal((CHUNKS[0] * 2, *CHUNKS[1:])).astype("f4")
    if codec_name == "zstd+crc32c":
        encode: Callable[[np.ndarray], bytes] = lambda a: _with_crc32c(  # noqa: E731
            bytes(numcodecs.Zstd().encode(a))
        )
    else:
        stream = CODECS[codec_name].stream
        encode = (lambda a: a.tobytes()) if stream is None else (lambda a: bytes(stream.encode(a)))
    if damage == "fewer bytes":
        return encode(rows[: CHUNKS[0] // 2])
    if damage == "more bytes":
        return encode(rows)
    if damage == "truncated":
        return stored[: len(stored) // 2]
    flipped = bytearray(stored)
    flipped[len(flipped) // 2] ^= 0x40
    return bytes(flipped)


def _with_crc32c(data: bytes) -> bytes:
    from insitubatch_nodes.io.metadata.zarr_compat import crc32c

    return data + struct.pack("<I", crc32c(data))


def _read_until_error(loader: Any) -> tuple[list[Any], BaseException]:
    batches = []
    with pytest.raises(ChunkReadError) as raised:
        for batch in loader:
            batches.append(batch)
    return batches, raised.value


def _assert_no_damaged_rows(batches: list[Any], rows: range) -> None:
    """Batches before the error hold only good rows, with their true values."""
    truth = _values()
    for batch in batches:
        indices = as_numpy(batch["sample_index"])
        assert not np.isin(indices, list(rows)).any()
        np.testing.assert_array_equal(as_numpy(batch["x"]), truth[indices])


@pytest.mark.parametrize(("fmt", "codec_name", "damage"), _cases())
def test_a_damaged_chunk_raises_and_is_never_yielded(
    place: Place, fmt: int, codec_name: str, damage: str
) -> None:
    array = _write(place, fmt, codec_name)
    key = f"x/{array.metadata.encode_chunk_key(DAMAGED)}"
    place.write(key, _forged(codec_name, place.read(key), damage))
    batches, error = _read_until_error(place.loader())
    _assert_no_damaged_rows(batches, range(8, 12))
    assert error.variable == "x" and error.coords == DAMAGED and error.key == key
    if fmt == 2 or codec_name == "zstd+crc32c" or CODECS[codec_name].v3_fast_path:
        # decoded by the library: the error says what is wrong with the bytes
        assert isinstance(error, CorruptChunkError), error
        assert f"(key '{key}')" in str(error) and "is corrupt" in str(error)
        if damage in ("fewer bytes", "more bytes") and codec_name != "zstd+crc32c":
            assert error.expected_nbytes == 768
            assert error.actual_nbytes in (384, 1536) or codec_name == "gzip"
    assert our_threads() == []


def test_the_ragged_last_chunk_is_checked_too(place: Place) -> None:
    array = _write(place, 3, "zstd")
    last = (SHAPE[0] // CHUNKS[0], 0, 0)  # holds rows 20, 21 (stored padded to 4)
    key = f"x/{array.metadata.encode_chunk_key(last)}"
    stored = place.read(key)
    padded_short = np.zeros((3, *CHUNKS[1:]), dtype="f4")  # 3 rows: covers 20, 21
    place.write(key, bytes(numcodecs.Zstd().encode(padded_short)))
    batches, error = _read_until_error(place.loader())
    assert isinstance(error, CorruptChunkError) and error.coords == last
    assert (error.expected_nbytes, error.actual_nbytes) == (768, 576)
    _assert_no_damaged_rows(batches, range(20, 22))
    assert len(stored) > 0


def _sharded(place: Place, index_checksum: bool) -> zarr.Array:
    index_codecs = [zarr.codecs.BytesCodec()]
    if index_checksum:
        index_codecs.append(zarr.codecs.Crc32cCodec())
    sharding = zarr.codecs.ShardingCodec(
        chunk_shape=(2, 6, 8),
        codecs=[zarr.codecs.BytesCodec(), zarr.codecs.ZstdCodec()],
        index_codecs=index_codecs,
    )
    return _write(place, 3, "zstd", serializer=sharding, compressors=None)


def _edit_index(place: Place, key: str, edit: Callable[[np.ndarray, int], None]) -> None:
    """Rewrite the entries of shard `key`'s index (at its end) through `edit(table,
    shard_size)`; a crc32c after them is left as it was, as damage would leave it."""
    shard = bytearray(place.read(key))
    entries = 16 * 2  # two inner chunks per shard: (4, 6, 8) / (2, 6, 8)
    start = len(shard) - entries - (4 if _ends_with_crc32c(shard, entries) else 0)
    table = np.frombuffer(bytes(shard[start : start + entries]), dtype="<u8").copy()
    edit(table.reshape(-1, 2), len(shard))
    shard[start : start + entries] = table.tobytes()
    place.write(key, bytes(shard))


def _ends_with_crc32c(shard: bytearray, entries: int) -> bool:
    from insitubatch_nodes.io.metadata.zarr_compat import crc32c

    table = bytes(shard[-(entries + 4) : -4])
    return crc32c(table) == struct.unpack("<I", bytes(shard[-4:]))[0]


def _swap(table: np.ndarray, size: int) -> None:
    table[[0, 1]] = table[[1, 0]]


def _empty(table: np.ndarray, size: int) -> None:
    table[1] = EMPTY


def _zero(table: np.ndarray, size: int) -> None:
    table[1] = 0


def _past_the_end(table: np.ndarray, size: int) -> None:
    table[1, 0] = size + 100


INDEX_DAMAGES = {
    "swapped": _swap,
    "emptied": _empty,
    "zeroed": _zero,
    "pointing past the shard": _past_the_end,
}


# Without a checksum on the index, swapped entries of equal-size chunks and an entry marked
# never-written are valid indexes that no reader can tell from the real one (zarr writes
# the checksum by default; docs/design/faults.md, Limits): those two are checked with it only.
INDEX_CASES = [
    pytest.param(damage, checksum, id=f"{damage}-{'crc32c' if checksum else 'plain'}-index")
    for damage in INDEX_DAMAGES
    for checksum in (True, False)
    if checksum or damage not in ("swapped", "emptied")
]


@pytest.mark.parametrize(("damage", "index_checksum"), INDEX_CASES)
def test_a_damaged_shard_index_raises(place: Place, damage: str, index_checksum: bool) -> None:
    array = _sharded(place, index_checksum)
    key = f"x/{array.metadata.encode_chunk_key((1, 0, 0))}"  # the shard of rows 4..7
    _edit_index(place, key, INDEX_DAMAGES[damage])
    batches, error = _read_until_error(place.loader())
    assert isinstance(error, CorruptChunkError), error
    assert error.variable == "x" and error.key == key and "shard index" in str(error)
    _assert_no_damaged_rows(batches, range(4, 8))
    assert our_threads() == []


@pytest.mark.parametrize("fmt", [2, 3])
def test_a_dtype_edited_in_the_metadata_raises(place: Place, fmt: int) -> None:
    _write(place, fmt, "zstd")
    key, field = ("x/zarr.json", "data_type") if fmt == 3 else ("x/.zarray", "dtype")
    metadata = json.loads(place.read(key))
    metadata[field] = "float64" if fmt == 3 else "<f8"
    place.write(key, json.dumps(metadata).encode())
    batches, error = _read_until_error(place.loader())
    assert isinstance(error, CorruptChunkError), error
    assert (error.expected_nbytes, error.actual_nbytes) == (1536, 768)
    assert batches == []  # every chunk is wrong: nothing is handed out


def zstd_zeros_frame(nbytes: int, *, declare_size: bool) -> bytes:
    """A valid zstd frame of `nbytes` zeros built from run-length blocks: 4 bytes per
    128 KiB, so a gigabyte fits in 32 KiB (a decompression bomb) without being made."""
    block = 128 * 1024
    descriptor = (3 << 6) if declare_size else 0  # an 8-byte size field, or none
    window = 7 << 3  # 2 ** (10 + 7) bytes = one block
    frame = bytearray(struct.pack("<I", 0xFD2FB528) + bytes([descriptor, window]))
    if declare_size:
        frame += struct.pack("<Q", nbytes)
    full, rest = divmod(nbytes, block)
    sizes = [block] * full + ([rest] if rest else [])
    for i, size in enumerate(sizes):
        last = int(i == len(sizes) - 1)
        frame += (last | 1 << 1 | size << 3).to_bytes(3, "little") + b"\0"  # RLE of 0
    return bytes(frame)


def gzip_zeros(nbytes: int) -> bytes:
    """A gzip stream of `nbytes` zeros, compressed piece by piece (nothing large is held)."""
    import zlib

    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = bytes(1 << 20)
    parts = [deflate.compress(piece) for _ in range(nbytes >> 20)]
    return b"".join([*parts, deflate.flush()])


def test_the_bomb_frames_are_what_they_claim() -> None:
    for declare_size in (True, False):
        frame = zstd_zeros_frame(3 << 20 | 5, declare_size=declare_size)
        assert bytes(numcodecs.Zstd().decode(frame)) == bytes(3 << 20 | 5)
    assert bytes(numcodecs.GZip().decode(gzip_zeros(4 << 20))) == bytes(4 << 20)


BOMB_SCRIPT = """
import resource, sys, zarr, numpy as np
from tests.io.test_damaged_stores import zstd_zeros_frame, gzip_zeros
from insitubatch_nodes import ChunkReadError, build_loader

def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

def store(path, codec):
    group = zarr.open_group(path, mode="w", zarr_format=3)
    array = group.create_array(
        "x", shape=(30, 64, 64), chunks=(4, 64, 64), dtype="float32", compressors=codec
    )
    array[...] = np.ones((30, 64, 64), dtype="float32")
    return array

def epoch(path):
    loader = build_loader(
        path, split="all", batch_size=4, device="cpu", memory_budget={budget}
    )
    return sum(len(batch["sample_index"]) for batch in loader)

store({root!r} + "/control.zarr", zarr.codecs.ZstdCodec())
assert epoch({root!r} + "/control.zarr") == 30
before = peak_mib()
cases = [
    ("zstd", 2, zstd_zeros_frame(1 << 30, declare_size=True)),
    ("zstd", 7, zstd_zeros_frame(1 << 30, declare_size=True)),  # the ragged last chunk
    ("zstd", 2, zstd_zeros_frame(1 << 30, declare_size=False)),
    ("zstd", 7, zstd_zeros_frame(1 << 30, declare_size=False)),
    ("gzip", 2, gzip_zeros(512 << 20)),
    ("gzip", 7, gzip_zeros(512 << 20)),
]
for i, (name, chunk, bomb) in enumerate(cases):
    codec = zarr.codecs.ZstdCodec() if name == "zstd" else zarr.codecs.GzipCodec()
    path = {root!r} + f"/bomb-{{i}}.zarr"
    store(path, codec)
    with open(f"{{path}}/x/c/{{chunk}}/0/0", "wb") as file:
        file.write(bomb)
    try:
        epoch(path)
    except ChunkReadError as error:
        assert error.coords == (chunk, 0, 0), error
    else:
        raise AssertionError(f"case {{i}} read a bomb without an error")
print("growth_mib", peak_mib() - before)
"""


def test_a_decompression_bomb_stays_within_the_memory_budget(tmp_path: Path) -> None:
    """Chunks of 64 KiB replaced by streams of 1 GiB (zstd, with and without a declared
    size) and 512 MiB (gzip) of zeros, in the middle and at the ragged last chunk: each
    ends in a ChunkReadError, and the process's peak RSS grows by less than the budget
    (64 MiB) plus 32 MiB of slack over an epoch of the same store undamaged."""
    import subprocess
    import sys

    from tests.helpers.paths import child_env

    budget = 64 << 20
    script = BOMB_SCRIPT.format(root=str(tmp_path), budget=budget)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=child_env()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    growth = float(done.stdout.split("growth_mib")[-1])
    assert growth < (budget >> 20) + 32, done.stdout


@pytest.mark.parametrize(
    ("fmt", "key"),
    [(3, "zarr.json"), (3, "x/zarr.json"), (2, ".zgroup"), (2, "x/.zarray"), (2, "x/.zattrs")],
)
def test_metadata_that_is_not_json_is_named(place: Place, fmt: int, key: str) -> None:
    _write(place, fmt, "zstd")
    place.write(key, place.read(key) + b"{,")  # a hand edit gone wrong
    with pytest.raises(ValueError, match=rf"^'{re.escape(key)}' in .* is not valid JSON \("):
        place.loader()


def test_a_shard_index_whose_entries_share_a_chunk_is_read_as_zarr_reads_it(
    place: Place,
) -> None:
    """A writer may store two identical inner chunks once and point both entries at it:
    entries equal to each other are not an overlap."""
    from insitubatch_nodes.io.metadata.zarr_compat import crc32c

    array = _sharded(place, index_checksum=True)
    key = f"x/{array.metadata.encode_chunk_key((1, 0, 0))}"  # inner chunks of rows 4..7
    shard = bytearray(place.read(key))
    entries = 16 * 2
    start = len(shard) - entries - 4
    table = np.frombuffer(bytes(shard[start : start + entries]), dtype="<u8").copy()
    table.reshape(2, 2)[1] = table.reshape(2, 2)[0]  # rows 6, 7 now read rows 4, 5
    shard[start : start + entries] = table.tobytes()
    shard[-4:] = struct.pack("<I", crc32c(table.tobytes()))
    place.write(key, bytes(shard))
    expected = zarr.open_group(place.writable, mode="r")["x"][...]
    np.testing.assert_array_equal(expected[6:8], expected[4:6])
    batches = list(place.loader())
    indices = np.concatenate([as_numpy(b["sample_index"]) for b in batches])
    rows = np.concatenate([as_numpy(b["x"]) for b in batches])
    np.testing.assert_array_equal(rows, expected[indices])
