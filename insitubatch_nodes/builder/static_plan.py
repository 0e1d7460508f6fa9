"""The static fields' part of a plan (`core.static_fields`): where each appears, the dtype
it is kept in, and what it costs the memory budget. `build_loader`'s plan and `insitubatch
inspect` both take it from here, so the budget inspect reports is the loader's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from insitubatch_nodes.core.channels import SPECLESS_STACK_KEY
from insitubatch_nodes.core.memory_bound import NO_STATICS, StaticCost
from insitubatch_nodes.core.patches import PatchSpec
from insitubatch_nodes.core.sample_spec import SampleSpec
from insitubatch_nodes.core.static_fields import (
    StaticPlacement,
    region_shape,
    sample_crop_size,
    static_copy_nbytes,
    static_nbytes,
    static_placements,
)
from insitubatch_nodes.io.zarr_source import ZarrSource
from insitubatch_nodes.nodes.cf_decode import NO_NUMPY_DTYPE

BFLOAT16_BYTES = 2  # what `NO_NUMPY_DTYPE` takes: statics are kept decoded, cast by torch


@dataclass(frozen=True)
class StaticPlan:
    """The static fields of a loader, decided.

    Args:
        placements: where each appears in a batch, in order.
        dtypes: static name -> the dtype its values are kept in (decoded, cast where
            numpy can cast).
        cost: what they hold of the memory budget.
    """

    placements: tuple[StaticPlacement, ...] = ()
    dtypes: dict[str, str] = field(default_factory=dict)
    cost: StaticCost = NO_STATICS


def plan_statics(
    source: ZarrSource,
    spec: SampleSpec | None,
    *,
    cast: str | None,
    stacked_on_host: bool,
    host_patches: PatchSpec | None,
    cast_on_cpu: bool = False,
) -> StaticPlan:
    """The plan of `source`'s static fields.

    Args:
        source: the opened source (its `statics` and their decodings).
        spec: the user's sample spec (with its statics), or None.
        cast: the dtype batches are cast to (`build_loader(dtype=...)`), or None.
        stacked_on_host: whether host batches stack the statics into channels (copies).
        host_patches: the patches when host batches crop the statics (copies at each
            sample's patch; a region is cut once, `core.static_fields.region_cut`), else
            None.
        cast_on_cpu: whether the statics that join batches after the device copy are
            cast there by torch on the CPU (`device="cpu"` with a cast numpy cannot hold):
            each then keeps its cast copy beside its decoded values.
    """
    if not source.statics:
        return StaticPlan()
    numpy_cast = None if cast == NO_NUMPY_DTYPE else cast
    dtypes = {name: numpy_cast or source.decodings[name].decoded_dtype for name in source.statics}
    shapes = {name: (shape, dtypes[name]) for name, shape in source.static_shapes().items()}
    in_batches = {
        name: (region_shape(shape, host_patches), d) for name, (shape, d) in shapes.items()
    }
    placements = tuple(static_placements(spec, list(source.statics), SPECLESS_STACK_KEY))
    copies = static_copy_nbytes(
        placements,
        in_batches,
        stacked=stacked_on_host,
        patch_size=sample_crop_size(host_patches),
    )
    kept = static_nbytes(shapes)
    if cast_on_cpu and cast == NO_NUMPY_DTYPE:
        after_copy = {p.name for p in placements if not (stacked_on_host and p.group is not None)}
        kept += sum(math.prod(shapes[n][0]) * BFLOAT16_BYTES for n in after_copy)
    cost = StaticCost(kept, copies)
    return StaticPlan(placements, dtypes, cost)
