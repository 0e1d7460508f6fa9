"""StaticFieldsNode: the static fields (`core.static_fields`) put in every batch.

The statics are read and decoded once, when the loader is wired, and handed to this node;
each batch gets each static under its key as `(batch, *grid)`. Nothing is copied per
sample where nothing needs it: a batch holds a broadcast view of the one array (numpy's
`broadcast_to` on the host, torch's `expand` on a device, where the static is moved once
and kept). With patches each sample's crop is taken at its patch origin, one vectorised
take per static and batch (a real copy, counted in the budget on the host). Stacking
(`StackChannelsNode`, after this node when stacking) concatenates the view into the
group's tensor: the one copy a stacked static costs.

It takes a host `Batch` of numpy arrays (before stacking), a `Batch` of device tensors
(`decode="gpu"`), or the device node's dict of tensors (unstacked, after the copy: the
static is on that device already, so nothing of it crosses per batch).

It keeps no state: its `state_dict` is its source's. Which statics a loader gives, and
how they are decoded, is in the state's fingerprint instead (`core.fingerprint`), so a
state saved with other statics is refused by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.batch_fields import PATCH_ORIGIN_KEY, SAMPLE_INDEX_KEY
from insitubatch_nodes.core.static_fields import StaticPlacement, crop_positions
from insitubatch_nodes.nodes.cf_decode import torch_dtype
from insitubatch_nodes.nodes.items import Batch
from insitubatch_nodes.nodes.state_views import state_reader


class StaticFieldsNode(BaseNode[Any]):
    """Each static field in every batch, `(batch, *grid)` (see the module).

    Args:
        source: batches: before stacking (host `Batch`es) or the device node's.
        statics: static name -> its values (the whole grid), decoded.
        placements: where each static appears (`core.static_fields.static_placements`).
        patch_size: the patch size when samples are crops (the batch's `patch_origin`
            says where), or None.
        device: where tensors of a batch that is a dict of tensors live (the device
            node's device); a static is moved there once.
        dtype: a dtype name tensors of a static are cast to once (`bfloat16`, which
            numpy cannot hold), or None.
    """

    def __init__(
        self,
        source: BaseNode[Any],
        statics: Mapping[str, np.ndarray],
        placements: Sequence[StaticPlacement],
        *,
        patch_size: tuple[int, ...] | None = None,
        device: str | torch.device = "cpu",
        dtype: str | None = None,
    ) -> None:
        super().__init__()
        self.source = source
        self._read_source_state = state_reader(source)  # kept states: no copy per pull
        self.placements = tuple(placements)
        self.patch_size = None if patch_size is None else tuple(patch_size)
        self.device = torch.device(device)
        self._host = {name: np.asarray(values) for name, values in statics.items()}
        self._cast = None if dtype is None else torch_dtype(dtype)
        self._on_device: dict[tuple[str, torch.device], torch.Tensor] = {}
        missing = [p.name for p in self.placements if p.name not in self._host]
        if missing:
            raise ValueError(f"no values given for static field(s) {missing}")

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(initial_state)  # no state of its own: its source's, as it is

    def _tensor(self, name: str, device: torch.device) -> torch.Tensor:
        """Static `name` on `device`, moved (and cast) there once."""
        found = self._on_device.get((name, device))
        if found is None:
            found = torch.from_numpy(self._host[name]).to(device)
            if self._cast is not None:
                found = found.to(self._cast)
            self._on_device[(name, device)] = found
        return found

    def next(self) -> Any:
        batch = next(self.source)
        count = int(batch[SAMPLE_INDEX_KEY].shape[0])
        origins = batch.get(PATCH_ORIGIN_KEY) if self.patch_size is not None else None
        on_host = isinstance(batch, Batch) and batch.device is None
        device = batch.device if isinstance(batch, Batch) else self.device
        for placement in self.placements:
            if on_host:
                static = self._host[placement.name]
                batch[placement.key] = _host_field(static, count, origins, self.patch_size)
            else:
                assert device is not None
                static = self._tensor(placement.name, torch.device(device))
                batch[placement.key] = _device_field(static, count, origins, self.patch_size)
        return batch

    def get_state(self) -> dict[str, Any]:
        return self.source.state_dict()

    def state_view(self) -> dict[str, Any]:
        """The state without a copy, for a node downstream to keep unchanged
        (`nodes.state_views`): its source's, as `get_state`. Stacked, this node sits
        below the device node, which reads it after every batch."""
        return self._read_source_state()


def _host_field(
    static: np.ndarray, count: int, origins: Any, size: tuple[int, ...] | None
) -> np.ndarray:
    """`static` for `count` samples: a broadcast view, or each sample's crop of `size`."""
    if origins is None or size is None:
        return np.broadcast_to(static, (count, *static.shape))
    origins = np.asarray(origins)
    index = crop_positions(origins, size)
    return np.moveaxis(static[(Ellipsis, *index)], static.ndim - len(size), 0)


def _device_field(
    static: torch.Tensor, count: int, origins: Any, size: tuple[int, ...] | None
) -> torch.Tensor:
    """`static` (a tensor) for `count` samples: an expanded view, or each sample's crop
    of `size`."""
    if origins is None or size is None:
        return static.expand(count, *static.shape)
    origins = torch.as_tensor(origins).to(static.device)
    index = crop_positions(origins, size, lambda n: torch.arange(n, device=static.device))
    return torch.movedim(static[(Ellipsis, *index)], static.ndim - len(size), 0)
