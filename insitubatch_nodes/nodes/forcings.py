"""ForcingsNode: adds each batch's forcings (`core.forcings`), computed where the batch is.

Put after `PinToDeviceNode`, so on a GPU the grid arithmetic runs there and nothing of
the forcings crosses but a few numbers per sample: the sun's place, the year and day
fractions of each sample's steps, computed on the host from `sample_index` (which stays
there) and the time coordinate read when the loader was built. The grid's coordinate terms
are moved to each device once and cached; with patches, each sample's crop of them is one
gather at its `patch_origin`, as the fields were cropped. Every forcing is yielded as a
`(batch, [steps,] *grid)` float32 tensor expanded (without copying) from the compact one it
was computed as, so it costs the memory of what it varies along. Stateless, so resume
stays exact; before `NormaliseNode`, which leaves keys it has no statistics for as they
are. Before the copy (`device=None`: where a stack takes forcings as channels, which it
concatenates on the host), the forcings are numpy views of tensors computed on the host,
or tensors on the device the batch says its arrays are on (`Batch.device`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.batch_fields import PATCH_ORIGIN_KEY, SAMPLE_INDEX_KEY
from insitubatch_nodes.core.forcings import ForcingPlan, GridTerms, forcing_values, grid_terms
from insitubatch_nodes.nodes import state_names
from insitubatch_nodes.nodes.items import Batch, as_batch
from insitubatch_nodes.nodes.state_checks import named_state, source_part


class ForcingsNode(BaseNode[dict[str, Any]]):
    """Each batch with its forcings added as keys (see the module).

    Args:
        source: the batches, with `sample_index` (and `patch_origin`, with patches).
        plan: what the forcings are computed from (`core.forcings.ForcingPlan`).
        device: the device the batches are on (after `PinToDeviceNode`), where the
            forcings are computed as tensors; None before the copy, where each batch says
            where its arrays live (`Batch.device`): forcings as numpy arrays on the host
            (computed there with torch) when it says None, as tensors on its device else.
    """

    STATE_NAME = state_names.FORCINGS
    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[dict[str, Any]],
        plan: ForcingPlan,
        device: str | torch.device | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self.plan = plan
        self.device = None if device is None else torch.device(device)
        self._whole: dict[torch.device, GridTerms] = {}  # the grid's terms, once per device
        self._offsets = [np.asarray(offsets, dtype=np.int64) for _, offsets in plan.groups]

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(source_part(self, initial_state, self.SOURCE_KEY))

    def _grid(self, device: torch.device, origins: Any) -> GridTerms | None:
        """The grid's terms on `device`, shaped `(1 or batch, 1, *grid)`: the whole
        grid's, or, with patches, each sample's crop of it."""
        plan = self.plan
        if plan.latitude is None or plan.longitude is None:
            return None
        whole = self._whole.get(device)
        if whole is None:
            latitude, longitude = plan.latitude[None, None], plan.longitude[None, None]
            whole = grid_terms(latitude, longitude, partial(_to_device, device))
            self._whole[device] = whole
        if plan.patch_size is None:
            return whole
        origin = torch.as_tensor(origins, device=device)
        return GridTerms(*(self._crop(term, origin) for term in _terms(whole)))

    def _crop(self, term: torch.Tensor, origin: torch.Tensor) -> torch.Tensor:
        """`term` (1, 1, *grid) cropped at each sample's origin along the patched (last)
        axes: (batch, 1, *crop), where axes it does not vary on stay of length 1."""
        size = self.plan.patch_size
        assert size is not None
        grid = term.shape[2:]
        first = len(grid) - len(size)
        index = []
        for axis, length in enumerate(grid):
            shape = [1] * (len(grid) + 1)  # (batch, *grid), for broadcasting
            if length == 1:
                along = torch.zeros(1, dtype=torch.long, device=term.device)
            elif axis < first:
                along = torch.arange(length, device=term.device)
                shape[axis + 1] = length
            else:
                steps = torch.arange(size[axis - first], device=term.device)
                along = origin[:, axis - first, None] + steps[None, :]  # (batch, crop)
                shape[0], shape[axis + 1] = along.shape
            index.append(along.reshape(shape))
        return term[0, 0][tuple(index)].unsqueeze(1)

    def next(self) -> dict[str, Any]:
        batch = next(self.source)
        where = self.device if self.device is not None else as_batch(batch).device
        device = torch.device("cpu") if where is None else where
        out = dict(batch)
        plan = self.plan
        index = np.asarray(torch.as_tensor(batch[SAMPLE_INDEX_KEY]).cpu(), dtype=np.int64)
        grid = self._grid(device, batch.get(PATCH_ORIGIN_KEY))
        to_array = partial(_to_device, device)
        for (group, _), offsets in zip(plan.groups, self._offsets, strict=True):
            seconds = None
            if plan.seconds is not None:
                seconds = plan.seconds[index[:, None] + offsets[None, :]]
            values = forcing_values(
                torch, plan.names, seconds, plan.calendar, grid, to_array, len(plan.grid)
            )
            shape = (len(index), len(offsets), *plan.output_grid)
            for key, value in zip(plan.keys(group), values.values(), strict=True):
                full = value.expand(shape)
                full = full if group is not None else full[:, 0]
                out[key] = full.numpy() if where is None else full
        if self.device is not None:
            return out
        return Batch(out, device=where)  # before the copy: say where they live

    def get_state(self) -> dict[str, Any]:
        return named_state(self, {self.SOURCE_KEY: self.source.state_dict()})


def _to_device(device: torch.device, array: np.ndarray) -> torch.Tensor:
    """A host array as a tensor on `device` (a view of it on the CPU)."""
    return torch.from_numpy(np.ascontiguousarray(array)).to(device, non_blocking=True)


def _terms(terms: GridTerms) -> tuple[torch.Tensor, ...]:
    return (
        terms.latitude_sin,
        terms.latitude_cos,
        terms.longitude_radians,
        terms.longitude_degrees,
    )
