"""StackChannelsNode: a group's variables (and levels) as one `(batch, [steps,] C, *grid)`.

The channel order is `core.channels.batch_channels(..., stacked=True)`, available as
`channel_order` before the first batch, so a model (and a checkpoint) can record it.
Stateless: one concatenation per group and batch, before the device copy (on the host),
or on the device where the blocks were decoded there (`decode="gpu"`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.channels import (
    DEFAULT_SPATIAL_DIMS,
    batch_channels,
    channel_names,
    stacked_groups,
)
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.sample_spec import SampleSpec, batch_key
from insitubatch_nodes.core.settings import as_int
from insitubatch_nodes.nodes.state_checks import named_state, source_part


class StackChannelsNode(BaseNode[dict[str, np.ndarray]]):
    """Each group's variables concatenated into one channel axis (see the module).

    Args:
        source: the gathered batches (`GatherNode`).
        layouts: the variables, by name.
        spec: the sample spec, or None for one group of all the variables.
        spatial_dims: the trailing grid axes of each variable (an int >= 0).
    """

    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[dict[str, np.ndarray]],
        layouts: Mapping[str, VariableLayout],
        spec: SampleSpec | None = None,
        *,
        spatial_dims: int = DEFAULT_SPATIAL_DIMS,
    ) -> None:
        super().__init__()
        self.source = source
        spatial_dims = as_int("spatial_dims", spatial_dims, minimum=0)
        self.spatial_dims = spatial_dims
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
        self._has_steps = spec is not None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(source_part(self, initial_state, self.SOURCE_KEY))

    def next(self) -> dict[str, np.ndarray]:
        batch = next(self.source)
        stacked = {field for parts in self._parts.values() for field, _ in parts}
        out = {k: v for k, v in batch.items() if k not in stacked}
        lead = 2 if self._has_steps else 1  # (batch,) or (batch, steps)
        for key, parts in self._parts.items():
            pieces = []
            for field, channels in parts:
                array = batch[field]
                grid = array.shape[array.ndim - self.spatial_dims :]
                pieces.append(array.reshape(*array.shape[:lead], channels, *grid))
            if isinstance(pieces[0], torch.Tensor):
                out[key] = torch.cat(pieces, dim=lead)
            else:
                out[key] = np.concatenate(pieces, axis=lead)
        return out

    def get_state(self) -> dict[str, Any]:
        return named_state(self, {self.SOURCE_KEY: self.source.state_dict()})
