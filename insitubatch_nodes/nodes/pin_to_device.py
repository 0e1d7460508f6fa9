"""PinToDeviceNode: numpy batches to torch tensors, on the GPU when there is one.

On CUDA the node keeps `prefetch` batches ahead of the one it hands out: each crosses in
one copy with `non_blocking=True` on the node's own stream (`device.batch_copy`), so the
copy of batch k+1 runs while the consumer's step on batch k does. A batch gathered into
page-locked memory (`GatherNode(pin_memory=True)`: the batch carries its slot,
`Batch.staged`) is copied from there; any other is first packed into a page-locked ring
slot of the node's own. Handing a batch out makes the consumer's current stream wait on the
copy's event, and `record_stream` keeps the caching allocator from reusing the memory
early. Without CUDA it is a zero-copy `torch.from_numpy`: torchdata's `PinMemory` cannot
even be built on a CPU-only torch, this node must run everywhere.

With `background` (the default whenever `prefetch` > 0) the batches ahead are pulled, and
their copies queued, by one producer thread (`nodes.producer_thread`), so the gather runs while
the training step does rather than before it; the consumer's thread only hands batches out.

The state is the source's state right after the batch last handed out was pulled; batches
pulled ahead but not handed out are pulled again after a resume, so resume is exact
whatever `prefetch` is. `close()` stops the producer and keeps what it had pulled.

Batches whose fields are already tensors on a device (blocks decoded there:
`AsyncFetchNode`'s `decode_on`; the batch says so, `Batch.device`) are passed through.
`sample_index` stays on the host: it indexes host-side metadata (time stamps, file
names), and reading it back from the device would stall the consumer's stream.
"""

from __future__ import annotations

import copy
import weakref
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.batch_fields import HOST_KEYS, SAMPLE_INDEX_KEY
from insitubatch_nodes.core.settings import as_bool, as_int
from insitubatch_nodes.device.batch_copy import BatchCopier
from insitubatch_nodes.device.copy_ahead import default_prefetch, staging_slots
from insitubatch_nodes.device.staging_ring import StagedBatch
from insitubatch_nodes.nodes import state_names
from insitubatch_nodes.nodes.items import as_batch
from insitubatch_nodes.nodes.producer_thread import ProducerThread
from insitubatch_nodes.nodes.state_checks import named_state, source_part
from insitubatch_nodes.nodes.state_views import state_reader


def resolve_device(device: str | torch.device | None) -> torch.device:
    """`None` means the current CUDA device when there is one, else the CPU; CUDA asked
    for on a machine without it is an error that says what to pass.

    Args:
        device: a device, its name, or None.
    """
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
    if resolved.type == "cuda" and resolved.index is None:
        resolved = torch.device("cuda", torch.cuda.current_device())
    return resolved


class _Transfer(Protocol):
    def submit(self, arrays: Mapping[str, np.ndarray], staged: StagedBatch | None) -> Any: ...

    def deliver(self, batch: Any) -> dict[str, torch.Tensor]: ...


class _ZeroCopy:
    """CPU: the tensors share the gathered arrays' memory."""

    def submit(
        self, arrays: Mapping[str, np.ndarray], staged: StagedBatch | None = None
    ) -> dict[str, torch.Tensor]:
        return {name: torch.from_numpy(array) for name, array in arrays.items()}

    def deliver(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return batch


class _PlainCopy(_ZeroCopy):
    """Devices other than CUDA and the CPU: torch's own synchronous copy."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def submit(
        self, arrays: Mapping[str, np.ndarray], staged: StagedBatch | None = None
    ) -> dict[str, torch.Tensor]:
        return {name: tensor.to(self.device) for name, tensor in super().submit(arrays).items()}


@dataclass(frozen=True)
class _Ahead:
    transfer: Any  # None when nothing needed copying
    ready: dict[str, torch.Tensor]  # sample_index, and tensors already on the device
    source_state: dict[str, Any]
    made: torch.cuda.Event | None = None  # device tensors made on a producer's stream


class PinToDeviceNode(BaseNode[dict[str, torch.Tensor]]):
    """Batches as tensors on `device`, copied ahead of the one handed out.

    Args:
        source: the gathered batches (`GatherNode`, `StackChannelsNode`, or a stage of
            yours returning a `Batch` or a dict of numpy arrays).
        device: where batches go; None for the current CUDA device, else the CPU.
        prefetch: batches copied ahead of the one handed out (an int >= 0; None for 2 on
            CUDA, else 0).
        background: pull them on a producer thread (True or False; None for whenever
            `prefetch` > 0).
    """

    STATE_NAME = state_names.PIN_TO_DEVICE
    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[Mapping[str, Any]],
        device: str | torch.device | None = None,
        *,
        prefetch: int | None = None,
        background: bool | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self._read_source_state = state_reader(source)  # kept states: no copy per pull
        self.device = resolve_device(device)
        if prefetch is None:
            prefetch = default_prefetch(self.device)
        prefetch = as_int("prefetch", prefetch, minimum=0)
        background = prefetch > 0 if background is None else as_bool("background", background)
        if background and prefetch < 1:
            raise ValueError(
                "background=True pulls batches ahead on a thread and needs prefetch >= 1; "
                "pass prefetch=1 or more, or background=False"
            )
        self.prefetch = prefetch
        self.background = background
        self._producer: ProducerThread[_Ahead] | None = None
        self._stop_on_collect: weakref.finalize | None = None
        self._transfer: _Transfer
        self.copier: BatchCopier | None = None
        if self.device.type == "cuda":
            self.copier = BatchCopier(self.device, slots=staging_slots(prefetch))
            self._transfer = self.copier
        elif self.device.type == "cpu":
            self._transfer = _ZeroCopy()
        else:
            self._transfer = _PlainCopy(self.device)
        self._ahead: deque[_Ahead] = deque()
        self._source_done = False
        self._delivered_source_state: dict[str, Any] = {}

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._stop_producer()
        self._ahead.clear()
        self._source_done = False
        self.source.reset(source_part(self, initial_state, self.SOURCE_KEY))
        self._delivered_source_state = self.source.state_dict()

    def close(self) -> None:
        """Stop the producer thread; the batches it pulled stay queued for the next `next()`."""
        self._stop_producer()

    def _stop_producer(self) -> None:
        if self._stop_on_collect is not None:
            self._stop_on_collect.detach()
            self._stop_on_collect = None
        if self._producer is not None:
            producer, self._producer = self._producer, None
            self._ahead.extend(producer.stop())

    def _pull_one(self) -> _Ahead:
        """The next batch from the source, its copy queued; `StopIteration` at the end."""
        batch = as_batch(next(self.source))
        state = self._read_source_state()
        host = dict(batch)
        ready = {}
        if SAMPLE_INDEX_KEY in host:
            ready[SAMPLE_INDEX_KEY] = torch.from_numpy(host.pop(SAMPLE_INDEX_KEY))
        made = None
        if batch.device is not None:  # the fields were gathered on a device
            for name in [n for n in host if n not in HOST_KEYS]:
                ready[name] = host.pop(name).to(self.device)
            if self.background and self.device.type == "cuda":
                made = torch.cuda.Event()  # gathered on this thread's stream: order the consumer
                made.record(torch.cuda.current_stream(self.device))
        transfer = self._transfer.submit(host, batch.staged) if host else None
        return _Ahead(transfer, ready, state, made)

    def _pull_ahead(self, count: int) -> None:
        while len(self._ahead) < count and not self._source_done:
            try:
                self._ahead.append(self._pull_one())
            except StopIteration:
                self._source_done = True

    def _start_producer(self) -> None:
        method = weakref.WeakMethod(self._pull_one)  # the thread must not keep the node alive
        device = self.device

        def produce() -> _Ahead:
            pull = method()
            if pull is None:
                raise StopIteration
            if device.type == "cuda":
                with torch.cuda.device(device):
                    return pull()
            return pull()

        self._producer = ProducerThread("pin", produce, self.prefetch)
        self._stop_on_collect = weakref.finalize(self, self._producer.stop)

    def _take_background(self) -> _Ahead | None:
        if self._producer is None and not self._source_done:
            self._start_producer()
        if self._ahead:
            return self._ahead.popleft()
        if self._producer is None:
            return None
        try:
            return self._producer.take()
        except StopIteration:
            self._source_done = True
            self._stop_producer()
            return None
        except BaseException:
            self._stop_producer()
            raise

    def next(self) -> dict[str, torch.Tensor]:
        if self.background:
            ahead = self._take_background()
            if ahead is None:
                raise StopIteration
        else:
            self._pull_ahead(1)
            if not self._ahead:
                raise StopIteration
            ahead = self._ahead.popleft()
            self._pull_ahead(self.prefetch)  # queue the next copies before the step on this
        self._delivered_source_state = ahead.source_state
        copied = {} if ahead.transfer is None else self._transfer.deliver(ahead.transfer)
        if ahead.made is not None:
            consumer = torch.cuda.current_stream(self.device)
            consumer.wait_event(ahead.made)
            for name, tensor in ahead.ready.items():
                if name != SAMPLE_INDEX_KEY:  # the fields moved to (or made on) the device
                    tensor.record_stream(consumer)
        return {**copied, **ahead.ready}

    def get_state(self) -> dict[str, Any]:
        return named_state(self, {self.SOURCE_KEY: copy.deepcopy(self._delivered_source_state)})
