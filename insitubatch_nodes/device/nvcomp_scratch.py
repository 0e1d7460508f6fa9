"""nvCOMP's device scratch memory, taken from torch's caching allocator.

Left to itself, nvCOMP allocates and frees its own scratch around each batched decode. A
`cudaFree` waits for the whole device, the training step's kernels included, so each decode
call would stall the step it is meant to overlap, and the memory it holds is invisible to
`torch.cuda.memory_allocated` and to the caching allocator's reuse. Routed through torch,
a scratch buffer is a block of torch's pool on the stream that is current when nvCOMP asks
(the reader's own stream: it decodes under `torch.cuda.stream`), reused stream-ordered
after it is dropped, and counted with the rest of the process's device memory.

nvCOMP's allocator is one per process, so installing it affects any other nvCOMP user in
the process too: their scratch also comes from torch's pool, which is safe for them (each
buffer stays valid until they drop it).
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any

import torch


class TorchScratch:
    """The allocator nvCOMP calls: `(nbytes, stream) -> an object whose .ptr is the address`.

    `requests` and `bytes_requested` count what nvCOMP asked for since the process began
    (for tests and reports; Python ints)."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes_requested = 0
        self._lock = threading.Lock()

    def __call__(self, nbytes: int, stream: Any) -> _ScratchBytes:
        """Allocate on torch's current device and stream.

        Args:
            nbytes: bytes nvCOMP asked for.
            stream: nvCOMP's stream; unused, since the reader makes that stream torch's
                current one while it decodes, which is the stream torch allocates on.
        """
        with self._lock:
            self.requests += 1
            self.bytes_requested += int(nbytes)
        return _ScratchBytes(int(nbytes))


class _ScratchBytes:
    """One scratch buffer; the tensor goes back to torch's pool when nvCOMP drops this."""

    def __init__(self, nbytes: int) -> None:
        self._tensor = torch.empty(max(nbytes, 1), dtype=torch.uint8, device="cuda")
        self.ptr = self._tensor.data_ptr()


TORCH_SCRATCH = TorchScratch()
_installed: set[int] = set()
_install_lock = threading.Lock()


def use_torch_scratch(nvcomp: ModuleType) -> None:
    """Make `nvcomp` take its device scratch from torch, once per module object.

    Args:
        nvcomp: the loaded `nvidia.nvcomp` module.
    """
    with _install_lock:
        if id(nvcomp) in _installed:
            return
        nvcomp.set_device_allocator(TORCH_SCRATCH)
        _installed.add(id(nvcomp))
