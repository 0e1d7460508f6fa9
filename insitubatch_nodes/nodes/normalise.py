"""NormaliseNode: `(x - mean) / std` per channel, on whatever device the batch is on.

Put after `PinToDeviceNode`, so on a GPU the arithmetic runs there (and the host-to-device
copy moves the stored dtype, e.g. float16, not float32). The mean/std vectors are moved to
each device once and cached. Stateless, so resume stays exact. Channels with zero spread
are divided by 1 instead of 0. NaN (values xarray masks) stays NaN unless `fill_nan` gives
the value it becomes after normalising (0.0: the channel's mean), since most models
cannot take NaN.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torchdata.nodes import BaseNode

from insitubatch_nodes.core.channels import DEFAULT_SPATIAL_DIMS
from insitubatch_nodes.core.settings import as_int
from insitubatch_nodes.nodes import state_names
from insitubatch_nodes.nodes.channel_stats import StatsLike, load_stats
from insitubatch_nodes.nodes.state_checks import named_state, source_part


class NormaliseNode(BaseNode[dict[str, torch.Tensor]]):
    """`(x - mean) / std` per channel (see the module).

    Args:
        source: the batches on their device (`PinToDeviceNode`).
        stats: the statistics (`ChannelStats` or its JSON file).
        channel_order: batch key -> its channel names (`core.channels.batch_channels`, or
            `StackChannelsNode.channel_order`); keys not listed pass through.
        spatial_dims: the trailing grid axes of each variable (an int >= 0).
        fill_nan: the value NaN becomes after normalising, or None to keep NaN.
        as_defined: channel names left as they are (mean 0, std 1): the forcings stacked
            beside the fields, which no statistics cover.
    """

    STATE_NAME = state_names.NORMALISE
    SOURCE_KEY = "source"

    def __init__(
        self,
        source: BaseNode[dict[str, torch.Tensor]],
        stats: StatsLike,
        channel_order: Mapping[str, Sequence[str]],
        *,
        spatial_dims: int = DEFAULT_SPATIAL_DIMS,
        fill_nan: float | None = None,
        as_defined: Collection[str] = (),
    ) -> None:
        super().__init__()
        self.source = source
        self.fill_nan = None if fill_nan is None else float(fill_nan)
        spatial_dims = as_int("spatial_dims", spatial_dims, minimum=0)
        loaded = load_stats(stats)
        self._host: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        for key, names in channel_order.items():
            covered = [n for n in names if n not in as_defined]
            mean = np.zeros(len(names), dtype=np.float32)
            std = np.ones(len(names), dtype=np.float32)
            if covered:
                rows = [i for i, n in enumerate(names) if n not in as_defined]
                mean[rows], std[rows] = loaded.vectors(covered)
            std[std == 0] = 1.0
            shape = (len(names), *([1] * spatial_dims))
            self._host[key] = (
                torch.from_numpy(mean).reshape(shape),
                torch.from_numpy(std).reshape(shape),
            )
        self._on_device: dict[tuple[str, torch.device], tuple[torch.Tensor, torch.Tensor]] = {}

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(source_part(self, initial_state, self.SOURCE_KEY))

    def _vectors(self, key: str, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        cached = self._on_device.get((key, device))
        if cached is None:
            mean, std = self._host[key]
            cached = (mean.to(device), std.to(device))
            self._on_device[(key, device)] = cached
        return cached

    def next(self) -> dict[str, torch.Tensor]:
        batch = next(self.source)
        out = dict(batch)
        for key in self._host:
            tensor = batch[key]
            mean, std = self._vectors(key, tensor.device)
            normalised = (tensor.to(torch.float32) - mean) / std
            if self.fill_nan is not None:
                normalised = torch.nan_to_num(
                    normalised, nan=self.fill_nan, posinf=float("inf"), neginf=float("-inf")
                )
            out[key] = normalised
        return out

    def get_state(self) -> dict[str, Any]:
        return named_state(self, {self.SOURCE_KEY: self.source.state_dict()})
