"""StackChannelsNode: a group's variables (and levels) as one `(batch, [steps,] C, *grid)`.

The channel order is `core.channels.batch_channels(..., stacked=True)`, available as
`channel_order` before the first batch, so a model (and a checkpoint) can record it.
Stateless: one concatenation per group and batch, before the device copy (on the host),
or on the device where the blocks were decoded there (`decode="gpu"`: the batch says so,
`Batch.device`).

Its output, not the gather's, is what crosses to the device: with `pin_memory` the
concatenation writes straight into a page-locked ring slot of this node's (as
`GatherNode(pin_memory=True)` does, see there), so a stacked batch, too, crosses in one
copy and is never packed again. Give the page-locked memory to this node, not the
gather, when stacking: the gather's batch is only read here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY
from insitubatch_nodes.core.channels import (
    DEFAULT_SPATIAL_DIMS,
    batch_channels,
    channel_names,
    stacked_groups,
)
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.sample_spec import SampleSpec, batch_key
from insitubatch_nodes.core.settings import as_bool, as_int
from insitubatch_nodes.device.copy_ahead import CUDA_PREFETCH, staging_slots
from insitubatch_nodes.device.staging_ring import StagingRing, page_locked
from insitubatch_nodes.nodes import state_names
from insitubatch_nodes.nodes.items import Batch, as_batch
from insitubatch_nodes.nodes.state_checks import named_state, source_part
from insitubatch_nodes.nodes.state_views import state_reader


class StackChannelsNode(BaseNode[Batch]):
    """Each group's variables concatenated into one channel axis (see the module).

    Args:
        source: the gathered batches (`GatherNode`).
        layouts: the variables, by name.
        spec: the sample spec, or None for one group of all the variables.
        spatial_dims: the trailing grid axes of each variable (an int >= 0).
        pin_memory: write host batches into page-locked memory (True or False): for a
            `PinToDeviceNode` on a CUDA device. Without CUDA the ring is plain memory.
        pinned_batches: page-locked batches the ring holds (an int >= 1): the device
            node's `prefetch` + 1 (see `GatherNode`).
    """

    STATE_NAME = state_names.STACK_CHANNELS
    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[Mapping[str, Any]],
        layouts: Mapping[str, VariableLayout],
        spec: SampleSpec | None = None,
        *,
        spatial_dims: int = DEFAULT_SPATIAL_DIMS,
        pin_memory: bool = False,
        pinned_batches: int = staging_slots(CUDA_PREFETCH),
    ) -> None:
        super().__init__()
        self.source = source
        self._read_source_state = state_reader(source)  # kept states: no copy per pull
        spatial_dims = as_int("spatial_dims", spatial_dims, minimum=0)
        pin_memory = as_bool("pin_memory", pin_memory)
        pinned_batches = as_int("pinned_batches", pinned_batches, minimum=1)
        self.spatial_dims = spatial_dims
        self.staging = StagingRing(pinned_batches, page_locked) if pin_memory else None
        self.channel_order = batch_channels(layouts, spec, stacked=True, spatial_dims=spatial_dims)
        self._parts = {
            key: [
                (
                    v if spec is None else batch_key(key, v),
                    len(channel_names(v, layouts[v], spatial_dims)),
                )
                for v in variables
            ]
            for key, variables in stacked_groups(layouts, spec).items()
        }
        self._stacked = {field for parts in self._parts.values() for field, _ in parts}
        self._has_steps = spec is not None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(source_part(self, initial_state, self.SOURCE_KEY))

    def next(self) -> Batch:
        batch = as_batch(next(self.source))
        lead = 2 if self._has_steps else 1  # (batch,) or (batch, steps)
        pieces = {
            key: [self._piece(batch[f], c, lead) for f, c in parts]
            for key, parts in self._parts.items()
        }
        out = {k: v for k, v in batch.items() if k not in self._stacked}
        if batch.device is not None:  # tensors on the device the blocks were decoded on
            out.update((key, torch.cat(p, dim=lead)) for key, p in pieces.items())
            return Batch(out, device=batch.device)
        if self.staging is None:
            out.update((key, np.concatenate(p, axis=lead)) for key, p in pieces.items())
            return Batch(out)
        host = {k: v for k, v in out.items() if k != SAMPLE_INDEX_KEY}  # patch origins
        shapes = {key: _concatenated(p, lead) for key, p in pieces.items()}
        shapes.update((k, (v.shape, v.dtype)) for k, v in host.items())
        staged = self.staging.stage(shapes)
        for key, p in pieces.items():
            np.concatenate(p, axis=lead, out=staged.arrays[key])
        for key, array in host.items():
            staged.arrays[key][...] = array
        return Batch({**out, **staged.arrays}, staged=staged)

    def _piece(self, array: Any, channels: int, lead: int) -> Any:
        """`array` as `(*lead axes, channels, *grid)`: its channel axes flattened."""
        grid = array.shape[array.ndim - self.spatial_dims :]
        return array.reshape(*array.shape[:lead], channels, *grid)

    def get_state(self) -> dict[str, Any]:
        return named_state(self, {self.SOURCE_KEY: self.source.state_dict()})

    def state_view(self) -> dict[str, Any]:
        """The state without a copy, for a node downstream to keep unchanged
        (`nodes.state_views`)."""
        return named_state(self, {self.SOURCE_KEY: self._read_source_state()})


def _concatenated(pieces: list[np.ndarray], axis: int) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype `np.concatenate(pieces, axis)` gives."""
    shape = list(pieces[0].shape)
    shape[axis] = sum(p.shape[axis] for p in pieces)
    return tuple(shape), np.result_type(*pieces)
