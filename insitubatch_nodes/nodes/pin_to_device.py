"""PinToDeviceNode: numpy batches to torch tensors, on the GPU when there is one.

On CUDA each batch is staged in page-locked memory and copied with `non_blocking=True` on
the node's own stream; the consumer's stream waits on an event recorded after the copy,
and `record_stream` keeps the caching allocator from reusing the memory while the
consumer still uses it. Without CUDA it is a zero-copy `torch.from_numpy`: torchdata's
`PinMemory` cannot even be built on a CPU-only torch, this node must run everywhere.

`sample_index` stays on the host: it indexes host-side metadata (time stamps, file
names), and reading it back from the device would stall the consumer's stream.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.items import SAMPLE_INDEX_KEY


def resolve_device(device: str | torch.device | None) -> torch.device:
    """`None` means the current CUDA device when there is one, else the CPU."""
    if device is None:
        return (
            torch.device("cuda", torch.cuda.current_device())
            if torch.cuda.is_available()
            else torch.device("cpu")
        )
    resolved = torch.device(device)
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"device={device!r} asks for CUDA but torch.cuda.is_available() is False on this "
            f"machine; pass device='cpu' (or None to pick automatically)"
        )
    return resolved


class PinToDeviceNode(BaseNode[dict[str, torch.Tensor]]):
    SOURCE_KEY = "source"

    def __init__(
        self, source: BaseNode[dict[str, np.ndarray]], device: str | torch.device | None = None
    ) -> None:
        super().__init__()
        self.source = source
        self.device = resolve_device(device)
        self._stream: torch.cuda.Stream | None = None
        if self.device.type == "cuda":
            self._stream = torch.cuda.Stream(device=self.device)

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(None if initial_state is None else initial_state[self.SOURCE_KEY])

    def next(self) -> dict[str, torch.Tensor]:
        batch = {name: torch.from_numpy(array) for name, array in next(self.source).items()}
        if self.device.type == "cpu":
            return batch
        host = {}
        if SAMPLE_INDEX_KEY in batch:
            host[SAMPLE_INDEX_KEY] = batch.pop(SAMPLE_INDEX_KEY)
        if self._stream is None:
            moved = {name: tensor.to(self.device) for name, tensor in batch.items()}
        else:
            moved = self._copy_to_cuda(batch, self._stream)
        return {**moved, **host}

    def _copy_to_cuda(
        self, batch: dict[str, torch.Tensor], stream: torch.cuda.Stream
    ) -> dict[str, torch.Tensor]:
        consumer = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(stream):
            moved = {
                name: tensor.pin_memory().to(self.device, non_blocking=True)
                for name, tensor in batch.items()
            }
            copied = torch.cuda.Event()
            copied.record(stream)
        consumer.wait_event(copied)
        for tensor in moved.values():
            tensor.record_stream(consumer)
        return moved

    def get_state(self) -> dict[str, Any]:
        return {self.SOURCE_KEY: self.source.state_dict()}
