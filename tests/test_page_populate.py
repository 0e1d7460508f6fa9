"""Populating a buffer's pages: contents left as they are, and (where Linux offers
`MADV_POPULATE_WRITE`) the pages present afterwards, so writing them takes no faults."""

from __future__ import annotations

import mmap
import platform
import resource
import sys

import numpy as np
import pytest

from insitubatch_nodes.io.page_populate import populate, supported

PAGES = 2048  # 8 MiB of 4 KiB pages


def _fresh(pages: int) -> np.ndarray:
    """Anonymous memory never written, in small pages (numpy asks big arrays for huge
    ones, which would fault once per 2 MiB and hide what is counted here)."""
    region = mmap.mmap(-1, pages * mmap.PAGESIZE)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):
        region.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(region, dtype=np.uint8)


def _kernel() -> tuple[int, int]:
    major, minor = platform.release().split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def _faults_writing(buffer: np.ndarray) -> int:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    buffer[:: mmap.PAGESIZE] = 1  # one byte per page
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_populate_leaves_the_contents_as_they_are() -> None:
    buffer = _fresh(64)
    values = np.random.default_rng(0).integers(0, 255, buffer.size, dtype=np.uint8)
    buffer[: buffer.size // 2] = values[: buffer.size // 2]  # half written, half fresh
    asked = populate(buffer[100:])  # not page-aligned: the whole pages inside it
    assert asked in (0, (64 - 1) * mmap.PAGESIZE)
    assert (buffer[: buffer.size // 2] == values[: buffer.size // 2]).all()
    assert not buffer[buffer.size // 2 :].any()  # fresh pages read as zeros still


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux madvise")
def test_populated_pages_take_no_faults_when_written() -> None:
    control = _fresh(PAGES)
    assert _faults_writing(control) >= PAGES // 2  # the count this test relies on
    buffer = _fresh(PAGES)
    if not populate(buffer):
        assert not supported()
        assert _kernel() < (5, 14), "the kernel has MADV_POPULATE_WRITE but it was not used"
        pytest.skip("this kernel has no MADV_POPULATE_WRITE")
    assert _faults_writing(buffer) < PAGES // 20


def test_populate_takes_only_contiguous_arrays() -> None:
    with pytest.raises(ValueError, match="C-contiguous"):
        populate(np.zeros((8, 8))[:, ::2])
    assert populate(np.zeros(0)) == 0
