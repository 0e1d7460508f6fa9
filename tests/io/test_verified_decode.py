"""`decode_exact` fills its destination exactly or raises, for every codec the fast path
decodes, whatever the sizes; the zstd frame reader agrees with libzstd's own frames."""

from __future__ import annotations

import gzip
import struct
import zlib

import numcodecs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.io.metadata.zarr_compat import crc32c
from insitubatch_nodes.io.reads.chunk_errors import ChunkBytesError
from insitubatch_nodes.io.reads.verified_decode import CHECKED_CODECS, decode_exact, strip_crc32c
from insitubatch_nodes.io.reads.zstd_frames import (
    first_frame_content_size,
    frame_at,
    frames,
    total_content_size,
)

CODECS = {
    "zstd": numcodecs.Zstd(),
    "zstd-checksum": numcodecs.Zstd(checksum=True),
    "blosc-lz4": numcodecs.Blosc(cname="lz4"),
    "blosc-zstd": numcodecs.Blosc(cname="zstd", shuffle=numcodecs.Blosc.BITSHUFFLE),
    "lz4": numcodecs.LZ4(),
    "gzip": numcodecs.GZip(),
    "zlib": numcodecs.Zlib(),
    "none": None,
}


def _encode(codec: object, values: np.ndarray) -> bytes:
    return values.tobytes() if codec is None else bytes(codec.encode(values))  # type: ignore[attr-defined]


def test_every_checked_codec_is_exercised() -> None:
    ids = {str(c.codec_id) for c in CODECS.values() if c is not None}
    assert ids == set(CHECKED_CODECS)


@settings(max_examples=60, deadline=None)
@given(
    codec=st.sampled_from(sorted(CODECS)),
    stored=st.integers(0, 70_000),
    wanted=st.integers(1, 70_000),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_stream_fills_its_destination_exactly_or_raises(
    codec: str, stored: int, wanted: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 4, stored, dtype=np.uint8)  # compressible, like real fields
    data = _encode(CODECS[codec], values)
    out = np.full(wanted, 0xAB, dtype=np.uint8)
    if stored == wanted:
        decode_exact(CODECS[codec], data, out)
        np.testing.assert_array_equal(out, values)
        return
    with pytest.raises(ChunkBytesError) as raised:
        decode_exact(CODECS[codec], data, out)
    error = raised.value
    assert error.expected_nbytes in (None, wanted)
    if error.actual_nbytes is not None and codec not in ("gzip", "zlib"):
        assert error.actual_nbytes == stored


@settings(max_examples=40, deadline=None)
@given(
    codec=st.sampled_from(sorted(c for c in CODECS if c != "none")),
    size=st.integers(64, 20_000),
    cut=st.floats(0.0, 0.95),
)
def test_a_cut_stream_raises(codec: str, size: int, cut: float) -> None:
    values = np.arange(size, dtype=np.uint8)
    data = _encode(CODECS[codec], values)
    with pytest.raises(ChunkBytesError):
        decode_exact(CODECS[codec], data[: int(len(data) * cut)], np.empty(size, np.uint8))


@settings(max_examples=40, deadline=None)
@given(
    size=st.integers(1, 600_000),
    checksum=st.booleans(),
    level=st.integers(1, 9),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_zstd_frame_reader_agrees_with_libzstd(
    size: int, checksum: bool, level: int, seed: int
) -> None:
    values = np.random.default_rng(seed).integers(0, 8, size, dtype=np.uint8)
    data = bytes(numcodecs.Zstd(level=level, checksum=checksum).encode(values))
    frame = frame_at(data)
    assert frame.content_size == size == first_frame_content_size(data, len(data))
    assert frame.end == len(data) and frame.has_checksum == checksum
    assert total_content_size(data + data) == 2 * size and len(frames(data + data)) == 2
    with pytest.raises(ChunkBytesError):
        frame_at(data[:-1])


def _frame(payload: bytes, *, declare: bool = True) -> bytes:
    """A zstd frame of raw blocks, declaring its size or not (what other writers make)."""
    header = bytearray(struct.pack("<I", 0xFD2FB528))
    if declare:
        header += bytes([0x80 | 0x20]) + struct.pack("<I", len(payload))  # single segment
    else:
        header += bytes([0x00, 0x58])  # window descriptor, no size
    blocks = [payload[i : i + 100_000] for i in range(0, len(payload), 100_000)] or [b""]
    for i, block in enumerate(blocks):
        last = int(i == len(blocks) - 1)
        header += (len(block) << 3 | last).to_bytes(3, "little") + block
    return bytes(header)


PAYLOAD = np.random.default_rng(1).integers(0, 255, 1000, dtype=np.uint8).tobytes()
SKIPPABLE = struct.pack("<II", 0x184D2A53, 4) + b"note"


@pytest.mark.parametrize(
    ("codec", "data"),
    [
        ("zstd", _frame(PAYLOAD[:500]) + _frame(PAYLOAD[500:])),
        ("zstd", _frame(PAYLOAD[:500], declare=False) + _frame(PAYLOAD[500:])),
        ("zstd", SKIPPABLE + _frame(PAYLOAD)),
        ("zstd", _frame(PAYLOAD) + SKIPPABLE),
        ("zstd", _frame(PAYLOAD) + _frame(b"")),
        ("gzip", gzip.compress(PAYLOAD[:300]) + gzip.compress(PAYLOAD[300:])),
        ("gzip", gzip.compress(PAYLOAD) + bytes(8)),
        ("zlib", zlib.compress(PAYLOAD) + b"junk"),
    ],
    ids=[
        "zstd-two-frames",
        "zstd-undeclared-then-declared",
        "zstd-skippable-first",
        "zstd-skippable-last",
        "zstd-empty-second-frame",
        "gzip-two-members",
        "gzip-zero-padding",
        "zlib-trailing-bytes",
    ],
)
def test_valid_streams_zarr_reads_are_read(codec: str, data: bytes) -> None:
    compressor = CODECS[codec]
    assert bytes(compressor.decode(data)) == PAYLOAD  # what zarr's read gives
    out = np.empty(len(PAYLOAD), np.uint8)
    decode_exact(compressor, data, out)
    assert out.tobytes() == PAYLOAD


@pytest.mark.parametrize(
    ("codec", "data"),
    [
        ("zstd", _frame(PAYLOAD[:500]) + _frame(PAYLOAD[500:750])),  # numcodecs fills 750
        ("zstd", _frame(PAYLOAD) + b"xyz"),
        ("gzip", gzip.compress(PAYLOAD[:500]) + b"junk"),
        ("gzip", gzip.compress(PAYLOAD[:500]) + gzip.compress(PAYLOAD[:300])),
    ],
    ids=["zstd-frames-short", "zstd-trailing-bytes", "gzip-trailing-bytes", "gzip-short"],
)
def test_streams_that_are_not_the_chunk_are_refused(codec: str, data: bytes) -> None:
    with pytest.raises(ChunkBytesError):
        decode_exact(CODECS[codec], data, np.empty(len(PAYLOAD), np.uint8))


def test_crc32c_is_checked_and_stripped() -> None:
    payload = bytes(range(200))
    stored = payload + crc32c(payload).to_bytes(4, "little")
    assert bytes(strip_crc32c(stored)) == payload
    damaged = bytearray(stored)
    damaged[7] ^= 1
    with pytest.raises(ChunkBytesError, match="crc32c checksum does not match"):
        strip_crc32c(bytes(damaged))
    with pytest.raises(ChunkBytesError, match="too short"):
        strip_crc32c(b"abc")
