"""Fault in block memory's pages before the decoders write them, without writing them.

The first write of a page of fresh memory costs a page fault, which the kernel serves by
finding and zeroing a page. A loader's block memory (1 GiB of window by default) is
written for the first time in its first epoch, by the decode threads; on the shared 2-core
VM the benchmarks run on, that made a first epoch's decode CPU 1.5-2.5 s against 0.66 s
for a later epoch's (benchmarks/README.md, "Defaults against hand tuning").

Linux (5.14+) faults in a range of pages as writable in one call that writes nothing,
`madvise(MADV_POPULATE_WRITE)`: the contents stay as they are, so it is safe while another
thread writes the same memory, and one call walks the range inside the kernel. The fetch
node asks for it on the slots a block leases for the first time, in the decode pool while
the block's reads are in flight (`nodes.async_fetch`): the faults leave the decoding, and
their cost falls in time the decoders would spend waiting on the store. On that VM it
halved the first epoch's system CPU.

The pages keep the huge size numpy asks for (arrays of 4 MiB and more). There a fresh huge
page is costly (1-5 s per GiB, against 0.5-0.7 s of 4 KiB pages: the VM's balloon hands
free memory back to the host), but small pages made the gather's row copies 13% slower in
every epoch after, for a cost paid once.

Where the call is missing (another OS, an older kernel, a seccomp filter), `populate` does
nothing and the pages fault in as they are written, as before.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import sys
import threading
from typing import Any

import numpy as np

MADV_POPULATE_WRITE = 23  # linux/mman.h; Python's mmap module names it from 3.13 only


class _Madvise:
    """libc's `madvise`, loaded on first use; `None` off Linux or without a libc."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded = False
        self._call: Any = None

    def __call__(self, address: int, length: int, advice: int) -> bool:
        """Whether the kernel took `advice` for the pages `[address, address + length)`."""
        with self._lock:
            if not self._loaded:
                self._loaded = True
                if sys.platform.startswith("linux"):
                    try:
                        call = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).madvise
                    except (OSError, AttributeError):
                        call = None
                    if call is not None:
                        call.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
                        call.restype = ctypes.c_int
                    self._call = call
        return self._call is not None and self._call(address, length, advice) == 0


_MADVISE = _Madvise()
_POPULATE = {"supported": sys.platform.startswith("linux")}


def _whole_pages(buffer: np.ndarray) -> tuple[int, int]:
    """The first address and length of the whole pages inside `buffer`."""
    if not buffer.flags.c_contiguous:
        raise ValueError("the buffer must be a C-contiguous array")
    page = mmap.PAGESIZE
    start = buffer.ctypes.data
    first = -(-start // page) * page
    last = (start + buffer.nbytes) // page * page
    return first, max(0, last - first)


def populate(buffer: np.ndarray) -> int:
    """Fault in the whole pages inside `buffer` as writable, writing nothing (see the
    module); the bytes of the pages it asked for, or 0 where the system cannot.

    Args:
        buffer: a C-contiguous array (a view of a larger one is fine); its contents are
            left as they are.
    """
    first, length = _whole_pages(buffer)
    if not _POPULATE["supported"] or not length:
        return 0
    if _MADVISE(first, length, MADV_POPULATE_WRITE):
        return length
    # EINVAL: a kernel without the advice; EPERM/ENOSYS: filtered. It would refuse every
    # time: stop asking.
    _POPULATE["supported"] = False
    return 0


def supported() -> bool:
    """Whether `populate` still asks the kernel (False once it refused, or off Linux)."""
    return _POPULATE["supported"]
