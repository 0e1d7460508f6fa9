"""`decode_exact` fills its destination exactly or raises, for every codec the fast path
decodes, whatever the sizes; the zstd frame reader agrees with libzstd's own frames."""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from insitubatch_nodes.io.verified_decode import (
    CHECKED_CODECS,
    ChunkBytesError,
    check_single_zstd_frame,
    decode_exact,
    strip_crc32c,
    zstd_content_size,
    zstd_frame,
)
from insitubatch_nodes.io.zarr_compat import crc32c

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
    frame = zstd_frame(data)
    assert frame.content_size == size == zstd_content_size(data)
    assert frame.end == len(data) and frame.has_checksum == checksum
    check_single_zstd_frame(data, size)
    with pytest.raises(ChunkBytesError):
        check_single_zstd_frame(data + data, size)  # a second frame after the first
    with pytest.raises(ChunkBytesError):
        check_single_zstd_frame(data[:-1], size)


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
