"""Fault in a buffer's pages before the decoders write it, without writing it.

The first write of a page of fresh memory costs a page fault, which the kernel serves by
finding and zeroing a page. A loader's block memory (1 GiB of window by default) is
written for the first time in its first epoch, by the decode threads, one fault per page:
on the 2-core VM the benchmarks run on, that was 0.35 s of decode CPU per GiB with 4 KiB
pages and 0.6-1.9 s with the huge pages numpy asks for, and it made the first epoch's
decode up to three times as costly as a later epoch's (benchmarks/README.md, "Defaults
against hand tuning"). Linux (5.14+) can fault in a range of pages as writable in one call
that writes nothing, `madvise(MADV_POPULATE_WRITE)`: the pages' contents stay as they are,
so it is safe while another thread writes the same memory, and one call walks the range
inside the kernel instead of taking one fault per page. The fetch node asks for it on the
slots a block leases for the first time, in the decode pool, while the block's reads are
in flight (`nodes.async_fetch`).

Where the call is missing (another OS, an older kernel, a seccomp filter), `populate` does
nothing and the pages fault in as they are written, as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import sys
import threading

import numpy as np

MADV_POPULATE_WRITE = 23  # linux/mman.h; Python's mmap module names it from 3.13 only


class _Madvise:
    """libc's `madvise`, loaded on first use; off for good once the kernel refuses the
    advice (it will refuse it every time)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._call: ctypes._CFuncPtr | None = None  # type: ignore[name-defined]
        self.supported = sys.platform.startswith("linux")

    def _function(self) -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
        with self._lock:
            if self._call is None and self.supported:
                name = ctypes.util.find_library("c")
                try:
                    libc = ctypes.CDLL(name, use_errno=True)
                    call = libc.madvise
                except (OSError, AttributeError):
                    self.supported = False
                    return None
                call.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
                call.restype = ctypes.c_int
                self._call = call
            return self._call

    def populate(self, address: int, length: int) -> bool:
        call = self._function()
        if call is None:
            return False
        if call(address, length, MADV_POPULATE_WRITE) == 0:
            return True
        # EINVAL: a kernel without the advice; EPERM/ENOSYS: filtered. ENOMEM or EFAULT
        # would mean a bad range, which the caller's array cannot give: stop asking too.
        self.supported = False
        return False


_MADVISE = _Madvise()


def populate(buffer: np.ndarray) -> int:
    """Fault in the whole pages inside `buffer` as writable, writing nothing (see the
    module); the bytes of the pages it asked for, or 0 where the system cannot.

    Args:
        buffer: a C-contiguous array (a view of a larger one is fine); its contents are
            left as they are.
    """
    if not buffer.flags.c_contiguous:
        raise ValueError("populate takes a C-contiguous array")
    if not _MADVISE.supported or buffer.nbytes == 0:
        return 0
    page = mmap.PAGESIZE
    start = buffer.ctypes.data
    first = -(-start // page) * page
    last = (start + buffer.nbytes) // page * page
    if last <= first:
        return 0
    return last - first if _MADVISE.populate(first, last - first) else 0


def supported() -> bool:
    """Whether `populate` still asks the kernel (False once it refused, or off Linux)."""
    return _MADVISE.supported
