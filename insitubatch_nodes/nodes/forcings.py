"""ForcingsNode: adds each batch's forcings (`core.forcings`), computed where the batch is.

Put after `PinToDeviceNode`, so on a GPU the grid arithmetic runs there and nothing of
the forcings crosses but a few numbers per sample: the sun's place, the year and day
fractions of each sample's steps, computed on the host from `sample_index` (which stays
there) and the time coordinate read when the loader was built. On the CPU they are
computed with numpy and handed over as tensors sharing its memory: torch's CPU thread pool
costs more than it gives for a few passes over the grid (10x on a busy host, as for CF
decoding). The grid's coordinate terms are made once per device and kept; with patches,
each sample's crop of them is one gather at its `patch_origin`, as the fields were cropped.
Every forcing is yielded as a `(batch, [steps,] *grid)` float32 array expanded (without
copying) from the compact one it was computed as, so it costs the memory of what it varies
along. Stateless, so resume stays exact; before `NormaliseNode`, which leaves keys it has
no statistics for as they are. Before the copy (`device=None`: on the CPU, where the device
node's producer thread then computes them while the step runs, as it decodes; or where a
stack takes forcings as channels, concatenated on the host) the forcings are numpy views
on the host, or tensors on the device the batch says its arrays are on (`Batch.device`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.batch_fields import PATCH_ORIGIN_KEY, SAMPLE_INDEX_KEY
from insitubatch_nodes.core.forcings import (
    IDLE_BATCHES,
    ForcingPlan,
    GridTerms,
    forcing_values,
    grid_terms,
)
from insitubatch_nodes.nodes import state_names
from insitubatch_nodes.nodes.items import Batch, as_batch
from insitubatch_nodes.nodes.reused_buffers import ReusedBuffers
from insitubatch_nodes.nodes.state_checks import named_state, source_part
from insitubatch_nodes.nodes.state_views import state_reader


class ForcingsNode(BaseNode[dict[str, Any]]):
    """Each batch with its forcings added as keys (see the module).

    Args:
        source: the batches, with `sample_index` (and `patch_origin`, with patches).
        plan: what the forcings are computed from (`core.forcings.ForcingPlan`).
        device: the device the batches are on (after `PinToDeviceNode`): forcings are
            tensors there; None before the copy, where each batch says where its arrays
            live (`Batch.device`): forcings as numpy arrays on the host when it says None,
            as tensors on its device else.
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
        self._read_source_state = state_reader(source)  # kept states: no copy per pull
        self.plan = plan
        self.device = None if device is None else torch.device(device)
        self._whole: dict[torch.device | None, GridTerms] = {}  # once per device
        self._offsets = [np.asarray(offsets, dtype=np.int64) for _, offsets in plan.groups]
        self._buffers = ReusedBuffers(max_idle_bytes=0)  # host forcings of dropped batches

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(source_part(self, initial_state, self.SOURCE_KEY))

    def _grid(self, device: torch.device | None, origins: Any) -> GridTerms | None:
        """The grid's terms where they are computed (numpy on the host for None, torch on
        `device` else), shaped `(1 or batch, 1, *grid)`: the whole grid's, or, with
        patches, each sample's crop of it."""
        plan = self.plan
        if plan.latitude is None or plan.longitude is None:
            return None
        whole = self._whole.get(device)
        if whole is None:
            latitude, longitude = plan.latitude[None, None], plan.longitude[None, None]
            whole = grid_terms(latitude, longitude, _converter(device))
            self._whole[device] = whole
        if plan.patch_size is None:
            return whole
        if device is None:
            origin = np.asarray(torch.as_tensor(origins), dtype=np.int64)
            arange: Any = np.arange
        else:
            origin = torch.as_tensor(origins, device=device)
            arange = partial(torch.arange, device=device)
        return GridTerms(*(self._crop(term, origin, arange) for term in _terms(whole)))

    def _crop(self, term: Any, origin: Any, arange: Any) -> Any:
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
                along = arange(1)
            elif axis < first:
                along = arange(length)
                shape[axis + 1] = length
            else:
                along = origin[:, axis - first, None] + arange(size[axis - first])[None, :]
                shape[0], shape[axis + 1] = along.shape
            index.append(along.reshape(shape))
        return term[0, 0][tuple(index)][:, None]

    def next(self) -> dict[str, Any]:
        batch = next(self.source)
        where = self.device if self.device is not None else as_batch(batch).device
        # numpy on the host (torch's CPU thread pool costs more than it gives for these
        # few passes over the grid, as for decoding), torch on an accelerator
        device = None if where is None or where.type == "cpu" else where
        index = np.asarray(torch.as_tensor(batch[SAMPLE_INDEX_KEY]), dtype=np.int64)
        out = dict(batch)
        tensors = where is not None
        out.update(self.forcings_of(index, batch.get(PATCH_ORIGIN_KEY), device, tensors=tensors))
        if self.device is not None:
            return out
        return Batch(out, device=where)  # before the copy: say where they live

    def forcings_of(
        self, index: np.ndarray, origins: Any, device: torch.device | None, *, tensors: bool
    ) -> dict[str, Any]:
        """The forcings of samples at stored steps `index`, by batch key, each expanded to
        `(batch, [steps,] *grid)` without copying: tensors on `device`, computed there with
        torch; for `device` None, computed with numpy on the host, as CPU tensors sharing
        its memory if `tensors`, else as numpy views.

        Args:
            index: the samples' anchors (`sample_index`), int64.
            origins: with patches, their crops' origins (`patch_origin`), else None.
            device: where to compute: None for numpy on the host, else a torch device.
            tensors: with `device` None, whether to hand over tensors.
        """
        plan = self.plan
        xp: Any = np if device is None else torch
        grid = self._grid(device, origins)
        empty = None
        if device is None:
            self._buffers.max_idle_bytes = IDLE_BATCHES * len(index) * plan.sample_nbytes()
            empty = partial(self._buffers.empty, dtype=np.dtype(np.float32))
        found = {}
        for (group, _), offsets in zip(plan.groups, self._offsets, strict=True):
            seconds = None
            if plan.seconds is not None:
                seconds = plan.seconds[index[:, None] + offsets[None, :]]
            names = plan.group_names(group)
            if not names:
                continue
            values = forcing_values(
                xp,
                names,
                seconds,
                plan.calendar,
                grid,
                _converter(device),
                len(plan.grid),
                empty,
            )
            shape = (len(index), len(offsets), *plan.output_grid)
            for key, value in zip(plan.keys(group), values.values(), strict=True):
                if device is None and not tensors:
                    full = _host_view(value, shape)
                else:
                    full = torch.as_tensor(value).expand(shape)
                found[key] = full if group is not None else full[:, 0]
        return found

    @property
    def reused_arrays(self) -> int:
        """Host forcings made in the memory of dropped batches' so far (the rest page-fault
        fresh memory in)."""
        return self._buffers.reused

    def get_state(self) -> dict[str, Any]:
        return named_state(self, {self.SOURCE_KEY: self.source.state_dict()})

    def state_view(self) -> dict[str, Any]:
        """The state without a copy of its source's, for a node downstream to keep
        unchanged (`nodes.state_views`): on the CPU, and stacked, this node sits below
        the device node, which reads it after every batch."""
        return named_state(self, {self.SOURCE_KEY: self._read_source_state()})


def _converter(device: torch.device | None) -> Any:
    """Host arrays -> arrays where the forcings are computed: numpy itself on the host
    (None), tensors on `device` else."""
    if device is None:
        return np.ascontiguousarray
    return lambda array: torch.from_numpy(np.ascontiguousarray(array)).to(device, non_blocking=True)


def _host_view(value: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """`value` broadcast to `shape` without copying, writable as its base is (so the
    device node's `torch.from_numpy` takes it as it is; torch refuses in-place writes to
    the expanded axes)."""
    strides = np.broadcast_to(value, shape).strides
    return np.lib.stride_tricks.as_strided(value, shape, strides)


def _terms(terms: GridTerms) -> tuple[Any, ...]:
    return (
        terms.latitude_sin,
        terms.latitude_cos,
        terms.longitude_radians,
        terms.longitude_degrees,
    )
