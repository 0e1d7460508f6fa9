"""StackChannelsNode: a group's variables (and levels) as one `(batch, [steps,] C, *grid)`.

The channel order is `core.channels.batch_channels(..., stacked=True)`, available as
`channel_order` before the first batch, so a model (and a checkpoint) can record it: each
group's channel sources in turn (`core.channels.stack_sources`: variables and levels,
then static fields, which a spec's steps axis repeats).
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

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY
from insitubatch_nodes.core.channels import (
    DEFAULT_SPATIAL_DIMS,
    ChannelSource,
    batch_channels,
    stack_sources,
)
from insitubatch_nodes.core.forcing_names import ForcingChoice
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.sample_spec import SampleSpec
from insitubatch_nodes.core.settings import as_bool, as_int
from insitubatch_nodes.core.static_fields import StaticPlacement
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
        statics: where the static fields appear (`core.static_fields.static_placements`):
            those of a group are its last channels, each `(batch, *grid)` in the batch
            (`StaticFieldsNode` puts them there), repeated along a spec's steps.
        static_layouts: the static fields' layouts, by name (their dtypes are checked).
        forcings: the forcings (`core.forcing_names.check_forcings`: names, or names by
            group; `ForcingsNode` puts them in the batch before this node): their groups'
            channels after the variables, float32, with the group's steps.
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
        statics: Sequence[StaticPlacement] = (),
        static_layouts: Mapping[str, VariableLayout] | None = None,
        forcings: ForcingChoice = (),
    ) -> None:
        super().__init__()
        self.source = source
        self._read_source_state = state_reader(source)  # kept states: no copy per pull
        spatial_dims = as_int("spatial_dims", spatial_dims, minimum=0)
        pin_memory = as_bool("pin_memory", pin_memory)
        pinned_batches = as_int("pinned_batches", pinned_batches, minimum=1)
        self.spatial_dims = spatial_dims
        self.staging = StagingRing(pinned_batches, page_locked) if pin_memory else None
        self.channel_order = batch_channels(
            layouts,
            spec,
            stacked=True,
            spatial_dims=spatial_dims,
            statics=statics,
            static_layouts=static_layouts,
            forcings=forcings,
        )
        self._sources = stack_sources(layouts, spec, spatial_dims, statics, forcings)
        self._stacked = {s.key for sources in self._sources.values() for s in sources}
        self._has_steps = spec is not None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(source_part(self, initial_state, self.SOURCE_KEY))

    def next(self) -> Batch:
        batch = as_batch(next(self.source))
        lead = 2 if self._has_steps else 1  # (batch,) or (batch, steps)
        pieces = {key: self._pieces(batch, sources, lead) for key, sources in self._sources.items()}
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

    def _pieces(self, batch: Batch, sources: list[ChannelSource], lead: int) -> list[Any]:
        """The group's sources as `(*lead axes, channels, *grid)` each: channel axes
        flattened, and a source without the steps axis (a static) repeated along it (a
        broadcast view: the concatenation is its one copy)."""
        pieces = [self._piece(batch[s.key], len(s.names), lead if s.steps else 1) for s in sources]
        steps = next((p.shape[1] for p, s in zip(pieces, sources, strict=True) if s.steps), 1)
        return [
            p if s.steps or lead == 1 else _repeated(p[:, None], steps)
            for p, s in zip(pieces, sources, strict=True)
        ]

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


def _repeated(array: Any, steps: int) -> Any:
    """`array` (batch, 1, ...) as (batch, steps, ...), a broadcast view (numpy or torch)."""
    shape = (array.shape[0], steps, *array.shape[2:])
    return array.expand(*shape) if torch.is_tensor(array) else np.broadcast_to(array, shape)


def _concatenated(pieces: list[np.ndarray], axis: int) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype `np.concatenate(pieces, axis)` gives."""
    shape = list(pieces[0].shape)
    shape[axis] = sum(p.shape[axis] for p in pieces)
    return tuple(shape), np.result_type(*pieces)
