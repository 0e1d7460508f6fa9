"""What a loader's batches hold, as the stages after the gather and `insitubatch inspect`
see it: each batch array's channel names, the layouts of its decoded and its static
values, and each batch key's decoding.

The plan (`builder.loader_plan`) and the inspect report (`cli.defaults_report`) both ask
here, so the channels inspect prints are those `Loader.channels` gives. Decoding comes
before stacking, and static fields are kept decoded and cast, so what stacking sees is
the decoded dtype, and with an area the box's grid, never the stored layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from insitubatch_nodes.builder.static_plan import StaticPlan
from insitubatch_nodes.core.cf_decoding import CFDecoding
from insitubatch_nodes.core.channels import batch_channels, stacked_groups
from insitubatch_nodes.core.forcing_names import ForcingChoice
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.sample_spec import SampleSpec
from insitubatch_nodes.io.zarr_source import ZarrSource


def batch_channel_order(
    opened: ZarrSource,
    spec: SampleSpec | None,
    statics: StaticPlan,
    *,
    stacked: bool,
    spatial_dims: int,
    forcings: ForcingChoice = (),
) -> dict[str, list[str]]:
    """Each batch array's channel names (`core.channels.batch_channels`), statics
    included: what `Loader.channels` gives when stacked, and `insitubatch inspect` prints.

    Args:
        opened: the opened source.
        spec: the spec of its time-varying variables (in stored steps), or None.
        statics: its statics' plan (`builder.static_plan.plan_statics`).
        stacked: whether a group's arrays are stacked into one tensor.
        spatial_dims: the trailing grid axes.
        forcings: the forcings stacked as channels (`core.forcing_names.check_forcings`).
    """
    return batch_channels(
        decoded_layouts(opened),
        spec,
        stacked=stacked,
        spatial_dims=spatial_dims,
        statics=statics.placements,
        static_layouts=kept_static_layouts(opened, statics),
        forcings=forcings,
    )


def stacked_channels(
    opened: ZarrSource,
    spec: SampleSpec | None,
    statics: StaticPlan,
    spatial_dims: int,
    *,
    forcings: ForcingChoice = (),
) -> dict[str, list[str]]:
    """Each stacked tensor's channel names in order: what `Loader.channels` gives and
    `insitubatch inspect --stack` prints (a static that no group of a spec names is a
    batch key of its own, not among them).

    Args:
        opened: the opened source.
        spec: the spec of its time-varying variables (in stored steps), or None.
        statics: its statics' plan (`builder.static_plan.plan_statics`).
        spatial_dims: the trailing grid axes.
        forcings: the forcings stacked as channels (`core.forcing_names.check_forcings`).
    """
    order = batch_channel_order(
        opened, spec, statics, stacked=True, spatial_dims=spatial_dims, forcings=forcings
    )
    return {key: order[key] for key in stacked_groups(opened.layouts, spec)}


def kept_static_layouts(source: ZarrSource, statics: StaticPlan) -> dict[str, VariableLayout]:
    """`source`'s static fields' layouts as batches hold them: with the dtype their values
    are kept in, and with an area, the box's grid (`ZarrSource.static_shapes`).

    Args:
        source: the opened source.
        statics: its statics' plan (`builder.static_plan.plan_statics`).
    """
    shapes = source.static_shapes()
    return {
        name: replace(
            layout,
            shape=shapes[name],
            chunks=tuple(min(c, s) for c, s in zip(layout.chunks, shapes[name], strict=True)),
            dtype=statics.dtypes[name],
        )
        for name, layout in source.statics.items()
    }


def decoded_layouts(source: ZarrSource) -> dict[str, VariableLayout]:
    """`source`'s layouts with the dtype of their decoded values.

    Args:
        source: the opened source.
    """
    return {
        name: replace(layout, dtype=source.decodings[name].decoded_dtype)
        for name, layout in source.layouts.items()
    }


def field_decodings(
    decodings: Mapping[str, CFDecoding], spec: SampleSpec | None
) -> dict[str, CFDecoding]:
    """Each gathered batch key's decoding: a variable's, under every key it fills.

    Args:
        decodings: variable -> its decoding.
        spec: the sample spec (keys `group/variable`), or None (keys are the variables).
    """
    if spec is None:
        return dict(decodings)
    return {key: decodings[variable] for key, _, variable, _ in spec.fields()}
