"""A loader's forcings, planned once from the opened source: the valid time of every stored
step (from the time coordinate) and the grid's latitude and longitude (from its
coordinates), read when the loader is built, so that a batch's forcings cost no read.

What only the store can judge is refused here, by name: a forcing that needs the time on
a store without a time coordinate (or with steps of no date), one that needs real dates
on a model's calendar (`core.forcings.check_calendar`), one that needs the place on a
grid without latitude and longitude coordinates, and a forcing whose batch key a
variable already fills.
"""

from __future__ import annotations

import numpy as np

from insitubatch_nodes.core.batch_fields import HOST_KEYS
from insitubatch_nodes.core.calendars import PROLEPTIC
from insitubatch_nodes.core.forcing_names import FORCINGS, ForcingChoice, chosen_names
from insitubatch_nodes.core.forcings import ForcingPlan, check_calendar, instant_seconds, needs
from insitubatch_nodes.core.patches import PatchSpec
from insitubatch_nodes.core.sample_spec import SampleSpec
from insitubatch_nodes.io.zarr_source import ZarrSource


def plan_forcings(
    choice: ForcingChoice,
    opened: ZarrSource,
    spec: SampleSpec | None,
    *,
    spatial_dims: int,
    patches: PatchSpec | None,
) -> ForcingPlan | None:
    """The plan of the forcings `names` over `opened`, or None for none.

    Args:
        choice: the checked forcings (`core.forcing_names.check_forcings`): names, or names
            by group of `spec`.
        opened: the opened source.
        spec: the sample spec in stored steps (`SplitPlan.time.spec`), or None.
        spatial_dims: the trailing grid axes of each variable.
        patches: the patch spec, or None.
    """
    names = chosen_names(choice)
    if not names:
        return None
    needs_time, needs_grid = needs(names)
    seconds, calendar = None, PROLEPTIC
    if needs_time:
        timed = [n for n in names if FORCINGS[n].needs_time]
        try:
            axis = opened.time_axis()
        except ValueError as err:
            raise ValueError(
                f"the forcings {timed} are computed from each sample's valid time: {err}"
            ) from None
        check_calendar(names, axis.calendar)
        calendar = axis.calendar
        seconds = instant_seconds(axis.dates, calendar)
        undated = int(np.isnan(seconds).sum())
        if undated:
            raise ValueError(
                f"the forcings {timed} are computed from each sample's valid time, and "
                f"{undated} step(s) of the time coordinate {axis.name!r} hold no date (NaT); "
                f"fill them in the store, or leave out those forcings"
            )
    latitude = longitude = None
    if needs_grid:
        placed = [n for n in names if FORCINGS[n].needs_grid]
        try:
            coordinates = opened.grid_coordinates(spatial_dims)
        except ValueError as err:
            raise ValueError(
                f"the forcings {placed} are computed from the grid's latitude and longitude: {err}"
            ) from None
        latitude, longitude = coordinates.latitude, coordinates.longitude
    if spec is None:
        groups: tuple[tuple[str | None, tuple[int, ...]], ...] = ((None, (0,)),)
    else:
        groups = tuple((name, group.offsets) for name, group in spec.groups.items())
    plan = ForcingPlan(
        names=names,
        seconds=seconds,
        calendar=calendar,
        latitude=latitude,
        longitude=longitude,
        groups=groups,
        grid=_grid(opened, spatial_dims),
        patch_size=None if patches is None else patches.size,
        by_group=dict(choice) if isinstance(choice, dict) else None,
    )
    _check_keys(plan, opened, spec)
    return plan


def _grid(opened: ZarrSource, spatial_dims: int) -> tuple[int, ...]:
    """The grid shape the fields share as batches hold it (their last `spatial_dims` axes;
    with an area, the box's)."""
    shapes = [layout.batch_sample_shape for layout in opened.layouts.values()]
    grids = {shape[len(shape) - spatial_dims :] for shape in shapes}
    if len(grids) != 1:
        raise ValueError(
            f"forcings are computed on one grid, and the selected variables' last "
            f"{spatial_dims} axes differ ({sorted(grids)}); select variables on one grid"
        )
    return grids.pop()


def _check_keys(plan: ForcingPlan, opened: ZarrSource, spec: SampleSpec | None) -> None:
    """Refuse a forcing whose batch key a variable (or a key every batch has) fills."""
    taken = set(HOST_KEYS)
    if spec is None:
        taken.update(opened.layouts)
    else:
        taken.update(key for key, _, _, _ in spec.fields())
    for group, _ in plan.groups:
        clash = sorted(taken.intersection(plan.keys(group)))
        if clash:
            raise ValueError(
                f"the forcings' batch keys {clash} are already a batch's keys (a variable of "
                f"that name); leave out those forcings, or select the variable under a spec"
            )
