"""Channel order: which channel of a batch array is which variable (and level).

Models want one `(batch, channels, *spatial)` tensor, and normalisation wants to know
which statistics belong to which channel. The trailing `spatial_dims` axes of a variable
are its grid; every axis between the sample axis and the grid (levels, members, ...) is
flattened into channels named `variable[i]` (C order); a variable without such axes is one
channel named after itself. Stacking concatenates a group's *channel sources* in order:
its variables (each one's levels in turn), then its forcings (`core.forcings`, one channel
each, named after the forcing, with the group's steps), then its static fields
(`core.static_fields`, one channel each, named after the variable). This module is the
single place that order is defined.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from insitubatch_nodes.core.forcing_names import ForcingChoice, group_forcings
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.sample_spec import SampleSpec, batch_key
from insitubatch_nodes.core.static_fields import StaticPlacement, sample_layout

DEFAULT_SPATIAL_DIMS = 2
SPECLESS_STACK_KEY = "fields"


def channel_shape(layout: VariableLayout, spatial_dims: int) -> tuple[int, ...]:
    """The non-grid axes of one sample as a batch holds it: what becomes channels.

    Args:
        layout: the variable's layout.
        spatial_dims: the trailing grid axes.
    """
    sample = layout.batch_sample_shape
    if spatial_dims < 0 or spatial_dims > len(sample):
        raise ValueError(
            f"spatial_dims={spatial_dims} but a sample of this variable has shape {sample}; "
            f"spatial_dims counts the trailing grid axes (e.g. 2 for latitude, longitude)"
        )
    return sample[: len(sample) - spatial_dims]


def channel_names(name: str, layout: VariableLayout, spatial_dims: int) -> list[str]:
    """`name` for a surface variable; `name_VALUE` per level when the channels are the
    levels picked by value (`temperature_500`, as ClimaX names them), in the order they
    were asked for, as the batch holds them; else `name[i]`.

    Args:
        name: the variable's name.
        layout: its layout (a pick with labels names its channels).
        spatial_dims: the trailing grid axes.
    """
    shape = channel_shape(layout, spatial_dims)
    if not shape:
        return [name]
    pick = layout.pick_on(1)
    if pick is not None and pick.labels and len(shape) == 1:
        return [f"{name}_{label}" for label in pick.batch_labels]
    count = math.prod(shape)
    return [f"{name}[{i}]" for i in range(count)]


def grid_shape(layout: VariableLayout, spatial_dims: int) -> tuple[int, ...]:
    sample = layout.batch_sample_shape
    return sample[len(sample) - spatial_dims :]


def stacked_groups(
    layouts: Mapping[str, VariableLayout], spec: SampleSpec | None
) -> dict[str, list[str]]:
    """Batch key of each stacked tensor -> the variables stacked into it, in order."""
    if spec is None:
        return {SPECLESS_STACK_KEY: list(layouts)}
    return {name: list(group.variables) for name, group in spec.groups.items()}


@dataclass(frozen=True)
class ChannelSource:
    """One batch array a stacked tensor takes channels from.

    Args:
        key: the batch key of the array.
        names: its channels' names, in order.
        steps: whether the array has the group's steps axis (a time-varying field with a
            spec); False for one to repeat along it (a static field).
    """

    key: str
    names: tuple[str, ...]
    steps: bool = True


def stack_sources(
    layouts: Mapping[str, VariableLayout],
    spec: SampleSpec | None,
    spatial_dims: int = DEFAULT_SPATIAL_DIMS,
    statics: Sequence[StaticPlacement] = (),
    forcings: ForcingChoice = (),
) -> dict[str, list[ChannelSource]]:
    """Each stacked tensor's channel sources, in channel order (see the module).

    Args:
        layouts: the time-varying variables (and, for their channels' grids and dtypes,
            nothing else), by name.
        spec: the sample spec (of time-varying variables), or None.
        spatial_dims: the trailing grid axes.
        statics: where the static fields appear (`core.static_fields.static_placements`);
            those of a group join its tensor.
        forcings: the forcings (`core.forcing_names.check_forcings`): names every group's
            tensor takes, or names by group; after its variables.
    """
    sources = {
        key: [
            ChannelSource(
                v if spec is None else batch_key(key, v),
                tuple(channel_names(v, layouts[v], spatial_dims)),
                spec is not None,
            )
            for v in variables
        ]
        for key, variables in stacked_groups(layouts, spec).items()
    }
    for key, group_sources in sources.items():
        group_sources.extend(
            ChannelSource(name if spec is None else batch_key(key, name), (name,), spec is not None)
            for name in group_forcings(forcings, None if spec is None else key)
        )
    for placement in statics:
        if placement.group is not None:
            sources[placement.group].append(ChannelSource(placement.key, (placement.name,), False))
    return sources


def batch_channels(
    layouts: Mapping[str, VariableLayout],
    spec: SampleSpec | None,
    *,
    stacked: bool,
    spatial_dims: int = DEFAULT_SPATIAL_DIMS,
    statics: Sequence[StaticPlacement] = (),
    static_layouts: Mapping[str, VariableLayout] | None = None,
    forcings: ForcingChoice = (),
) -> dict[str, list[str]]:
    """Each batch array's channel names, in channel order (axis -(spatial_dims + 1)).

    Args:
        layouts: the time-varying variables, by name.
        spec: the sample spec (of time-varying variables), or None.
        stacked: whether a group's arrays are stacked into one tensor.
        spatial_dims: the trailing grid axes.
        statics: where the static fields appear (`core.static_fields.static_placements`).
        static_layouts: the static fields' layouts (checked for stacking beside the
            fields: their dtypes), or None.
        forcings: the forcings (`core.forcing_names.check_forcings`): stacked, channels of
            their groups (float32, on its grid); unstacked, keys of their own that no
            statistics cover (not listed).
    """
    if stacked:
        groups = stacked_groups(layouts, spec)
        every = dict(layouts)
        every.update((n, sample_layout(lay)) for n, lay in (static_layouts or {}).items())
        for placement in statics:
            if placement.group is not None and placement.name in every:
                groups[placement.group] = [*groups[placement.group], placement.name]
        for key, variables in groups.items():  # float32 on the grid of the group's first
            names = group_forcings(forcings, None if spec is None else key)
            if names and variables and variables[0] in every:
                grid = every[variables[0]]
                every.update((f"{key}/{name}", replace(grid, dtype="float32")) for name in names)
                groups[key] = [*variables, *(f"{key}/{name}" for name in names)]
        check_stackable(every, groups, spatial_dims)
        found = {
            key: [name for source in sources for name in source.names]
            for key, sources in stack_sources(
                layouts, spec, spatial_dims, statics, forcings
            ).items()
        }
        found.update((p.key, [p.name]) for p in statics if p.group is None)
        return found
    if spec is None:
        found = {v: channel_names(v, layouts[v], spatial_dims) for v in layouts}
    else:
        found = {
            key: channel_names(variable, layouts[variable], spatial_dims)
            for key, _, variable, _ in spec.fields()
        }
    found.update((p.key, [p.name]) for p in statics)
    return found


def check_stackable(
    layouts: Mapping[str, VariableLayout],
    groups: Mapping[str, Sequence[str]],
    spatial_dims: int,
) -> None:
    for key, variables in groups.items():
        grids = {v: grid_shape(layouts[v], spatial_dims) for v in variables}
        if len(set(grids.values())) > 1:
            raise ValueError(
                f"cannot stack {key!r}: its variables have different grids "
                + ", ".join(f"{v}={g}" for v, g in grids.items())
                + f" (the last spatial_dims={spatial_dims} axes); put them in separate groups"
            )
        dtypes = {layouts[v].dtype for v in variables}
        # floats stack in the widest of them (decoded values: float32 beside float64)
        if len(dtypes) > 1 and not all(np.dtype(d).kind == "f" for d in dtypes):
            raise ValueError(
                f"cannot stack {key!r}: its variables have different dtypes {sorted(dtypes)}; "
                f"stack variables of one dtype or normalise them separately"
            )
