"""Upper bounds measured on the same store: zarr's own sequential read, decode-only of the
stored chunk bytes already in RAM on every core, and memcpy of the decoded volume."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import zarr
from numcodecs.abc import Codec

from insitubatch_nodes.io.reads.codecs import ArrayCompressor, v3_compressor


def zarr_sequential(path: str, variables: Sequence[str]) -> float:
    """Seconds for zarr to read every variable front to back in large slices."""
    group = zarr.open_group(path, mode="r")
    start = time.perf_counter()
    for name in variables:
        array = group[name]
        step = max(array.chunks[0], 48)
        for i in range(0, array.shape[0], step):
            array[i : i + step]
    return time.perf_counter() - start


def decode_only(path: str, variables: Sequence[str]) -> float:
    """Seconds to decode every stored chunk (bytes already in RAM) on all cores, with
    numcodecs (GIL released), straight into preallocated arrays."""
    group = zarr.open_group(path, mode="r")
    jobs = []
    for name in variables:
        array = group[name]
        (compressor,) = array.compressors
        known = v3_compressor(compressor.to_dict())  # numcodecs' decoder, as the library's
        assert isinstance(known, ArrayCompressor), known
        codec = known.codec
        for chunk_file in sorted((Path(path) / name / "c").rglob("*")):
            if chunk_file.is_file():
                jobs.append((codec, chunk_file.read_bytes(), array.chunks, np.dtype(array.dtype)))
    threads = os.cpu_count() or 1

    def decode(batch: list[tuple[Codec, bytes, tuple[int, ...], np.dtype]]) -> None:
        for codec, data, chunks, dtype in batch:
            out = np.empty(chunks, dtype=dtype)
            codec.decode(data, out=out)

    batches = [jobs[i :: threads * 4] for i in range(threads * 4)]
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(decode, batches))
    return time.perf_counter() - start


def memcpy(nbytes: int) -> float:
    """Seconds to copy `nbytes` once between warm buffers (the best of five passes)."""
    piece = min(nbytes, 64 << 20)
    source = np.ones(piece, dtype=np.uint8)
    target = np.ones_like(source)  # touched: no page faults in the timing
    passes = max(1, nbytes // piece)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(passes):
            np.copyto(target, source)
        best = min(best, time.perf_counter() - start)
    return best * nbytes / (passes * piece)
