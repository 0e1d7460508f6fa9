"""What the forcings hold of a loader's memory budget, beside the static fields.

Their inputs (each step's time, the grid's coordinates) are kept for the whole run; where
batches are made on the host, each sample's forcings are too, with their copies in a
stack and the batches a stage keeps for reuse. The plan (`builder.loader_plan`) and the
inspect report (`cli.defaults_report`) both count them here, so the budget inspect
reports is the loader's.
"""

from __future__ import annotations

import math

import numpy as np

from insitubatch_nodes.core.forcings import IDLE_BATCHES, ForcingPlan
from insitubatch_nodes.core.memory_bound import StaticCost
from insitubatch_nodes.io.zarr_source import ZarrSource


def with_forcings(
    cost: StaticCost,
    forcings: ForcingPlan | None,
    opened: ZarrSource,
    on_host: bool,
    *,
    stacked: bool,
    batch_size: int,
) -> StaticCost:
    """What the statics and the forcings hold of the budget (`core.memory_bound.StaticCost`):
    the forcings' time and coordinates, kept, and, where batches are made on the host,
    each sample's forcings and their copies in a stack (in the stack's widest dtype), and
    the memory of `IDLE_BATCHES` dropped batches' forcings, kept for reuse.

    Args:
        cost: what the static fields hold (`builder.static_plan.StaticPlan.cost`).
        forcings: the forcings' plan (`builder.forcing_plan.plan_forcings`), or None.
        opened: the opened source.
        on_host: whether batches are made on the host (the forcings computed there).
        stacked: whether the forcings are stacked as channels there.
        batch_size: samples per batch.
    """
    if forcings is None:
        return cost
    sample = idle = 0
    if on_host:
        sample = forcings.sample_nbytes()
        idle = IDLE_BATCHES * batch_size * sample
        if stacked:
            widest = max(
                [4, *(np.dtype(d.decoded_dtype).itemsize for d in opened.decodings.values())]
            )
            sample += widest * math.prod(forcings.output_grid) * forcings.stacked_steps()
    return StaticCost(
        resident_bytes=cost.resident_bytes,
        sample_bytes=cost.sample_bytes + sample,
        forcing_bytes=cost.forcing_bytes + forcings.resident_nbytes() + idle,
    )
