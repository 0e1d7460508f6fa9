"""CFDecodeNode: stored values -> the values `xr.open_zarr` shows (`core.cf_decoding`).

A stage of its own, out of the read path: blocks, the pool and the gather hold the stored
dtype (a packed int16 store costs half a float32 one), and the values are decoded once
per batch, one vectorised pass per field. Where it sits is the builder's choice
(`builder.wire_loader`): after the device copy when batches cross unstacked (int16
crosses at half the bytes, and the arithmetic runs on the device), before
`StackChannelsNode` when stacking (variables of different stored dtypes and decodings
cannot share one tensor before they are decoded), before `NormaliseNode` always.

It takes either a host `Batch` of numpy arrays (before stacking: it gives one back, of
numpy arrays), a `Batch` of device tensors (`decode="gpu"`), or the device node's dict of
tensors, and replaces each field by its decoded values: with numpy where the values are
on the host (`core.decoded_values.decode_values`; torch's CPU ops wake a thread pool per
step, which costs ten times the arithmetic on a busy host, and on one thread still took
2.4 times numpy's time), with torch on a device (in place, one tensor per field).

On the host it runs on the thread that pulls from it: the consumer's, or with
`device_prefetch` the device node's producer thread, where it overlaps the training step
(benchmarks/README.md, "CF decoding").

Decoding is computed in the decoded dtype (float64 for packed Zarr, as xarray does:
multiply, then add; NaN where a stored value is masked), then cast to `dtype` when one
is given, so that a batch equals `xr.open_zarr(p)[v].astype(dtype)` bit for bit on the
CPU.

It keeps no state: its `state_dict` is its source's, so a graph with or without it saves
the same state. What it decodes is in the state's fingerprint instead (the permutation
node checks it), so a state saved on other values is refused by name there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.cf_decoding import CFDecoding
from insitubatch_nodes.core.decoded_values import decode_values
from insitubatch_nodes.nodes.items import Batch
from insitubatch_nodes.nodes.state_views import state_reader

NO_NUMPY_DTYPE = "bfloat16"  # the one cast numpy cannot hold


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a numpy dtype name (or `bfloat16`).

    Args:
        name: a dtype name such as `"float32"`, `"uint16"` or `"bfloat16"`.
    """
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"torch has no dtype {name!r}")
    return dtype


def decode_tensor(stored: torch.Tensor, decoding: CFDecoding, cast: str | None) -> torch.Tensor:
    """`stored` decoded (see the module), as a new tensor on its device.

    Args:
        stored: a field's stored values, of `decoding.stored_dtype`.
        decoding: how this field's variable is decoded.
        cast: the dtype to cast the decoded values to, or None to keep theirs.
    """
    values = stored
    if decoding.unsigned_as is not None:  # the same bits, read with the other sign
        values = values.view(torch_dtype(decoding.unsigned_as))
    mask = None
    for masked in decoding.masked:
        hit = values == masked
        mask = hit if mask is None else mask | hit
    decoded = values.to(torch_dtype(decoding.decoded_dtype))
    # in place: one tensor of the decoded dtype, where each step made one of its own
    packed = decoding.scale_factor is not None or decoding.add_offset is not None
    if decoded is values and (packed or mask is not None):
        decoded = decoded.clone()  # the stored buffer may be reused: never write into it
    if decoding.scale_factor is not None:
        decoded.mul_(decoding.scale_factor)
    if decoding.add_offset is not None:
        decoded.add_(decoding.add_offset)
    if mask is not None:
        decoded.masked_fill_(mask, float("nan"))
    if cast is not None:
        decoded = decoded.to(torch_dtype(cast))
    return decoded


class CFDecodeNode(BaseNode[Any]):
    """Each variable's stored values decoded as `xr.open_zarr` decodes them (see the
    module).

    Args:
        source: batches: `GatherNode`'s (before stacking) or `PinToDeviceNode`'s.
        decodings: batch key -> how its values are decoded (`ZarrSource.decodings`, by
            batch key); keys not listed pass through.
        dtype: a float dtype name (`core.cf_decoding.CAST_DTYPES`) every listed field is
            cast to after decoding, or None for the decoded dtype.
    """

    def __init__(
        self,
        source: BaseNode[Any],
        decodings: Mapping[str, CFDecoding],
        *,
        dtype: str | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self._read_source_state = state_reader(source)  # kept states: no copy per pull
        self.dtype = dtype
        self.decodings = {
            key: decoding
            for key, decoding in decodings.items()
            if decoding.changes_values or (dtype is not None and dtype != decoding.decoded_dtype)
        }

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(initial_state)  # no state of its own: its source's, as it is

    def next(self) -> Any:
        batch = next(self.source)
        numpy_fields = isinstance(batch, Batch) and batch.device is None
        for key, decoding in self.decodings.items():
            field = batch[key]
            if numpy_fields:
                batch[key] = self._decoded_on_host(field, decoding)
            elif field.device.type == "cpu":  # numpy's loops: no thread pool to wake
                batch[key] = self._decoded_on_host(field.numpy(), decoding, as_tensor=True)
            else:
                batch[key] = decode_tensor(field, decoding, self.dtype)
        return batch

    def _decoded_on_host(self, stored: Any, decoding: CFDecoding, as_tensor: bool = False) -> Any:
        """`stored` (numpy) decoded by `core.decoded_values.decode_values`; a tensor when
        asked for or when cast to a dtype numpy has none of (`bfloat16`)."""
        numpy_cast = None if self.dtype == NO_NUMPY_DTYPE else self.dtype
        decoded = decode_values(stored, decoding, numpy_cast)
        if numpy_cast == self.dtype and not as_tensor:
            return decoded
        if not as_tensor:
            raise ValueError(
                f"CFDecodeNode(dtype={self.dtype!r}) before the device copy: numpy holds no "
                f"{self.dtype}; put the node after PinToDeviceNode, where batches are tensors"
            )
        tensor = torch.from_numpy(decoded)
        return tensor if numpy_cast == self.dtype else tensor.to(torch_dtype(self.dtype))

    def get_state(self) -> dict[str, Any]:
        return self.source.state_dict()

    def state_view(self) -> dict[str, Any]:
        """The state without a copy, for a node downstream to keep unchanged
        (`nodes.state_views`): its source's, as `get_state`. The device node reads it
        after every batch, where a copy of the nested states cost more than the rest
        of the batch's bookkeeping (issue 33)."""
        return self._read_source_state()
