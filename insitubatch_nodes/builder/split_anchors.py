"""The anchors of one split that a sample spec may use, on the loader's unit grid, and how
mixed a uniform shuffle of them would make a batch.

`build_loader` reads exactly these anchors (`plan_split`: the grid of its revisits, its
time settings, the units its stride is dealt in, the anchors), and `insitubatch inspect`
(`cli.defaults_report`) reports on them, so both take them from here: a spec that names a
variable not opened, or windows that leave a split no anchor, are refused with the same
words wherever the split is asked for. `split_mixing` is the uniform global shuffle that
the mixing figures of `Loader.stats()` (counted by the gather) are measured against.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.builder.time_selection import Duration, TimeSelection, time_selection
from insitubatch_nodes.core.anchors import AnchorSet
from insitubatch_nodes.core.geometry import SampleGeometry
from insitubatch_nodes.core.patches import PatchSpec
from insitubatch_nodes.core.quality import UniformMixing
from insitubatch_nodes.core.sample_spec import SampleSpec
from insitubatch_nodes.core.stride_units import StrideUnits, stride_units
from insitubatch_nodes.io.zarr_source import ZarrSource


@dataclass(frozen=True, eq=False)
class SplitPlan:
    """The samples a loader draws from one split.

    Args:
        grid: the unit grid it shuffles and deals by: the source's, or its visits with
            revisits (`SampleGeometry.visits`), or units a stride fits
            (`core.stride_units`).
        time: what the time settings come to: the spec in stored steps, and the steps
            allowed as anchors (`builder.time_selection`).
        anchors: the split's anchors under that spec and those steps, unit by unit.
        units: which units the stride is dealt in, and why (`core.stride_units`).
    """

    grid: SampleGeometry
    time: TimeSelection
    anchors: AnchorSet
    units: StrideUnits


def plan_split(
    opened: ZarrSource,
    split: str,
    spec: SampleSpec | None,
    *,
    revisits: int = 1,
    stride: int | None = None,
    frequency: Duration | None = None,
    max_gap: Duration | None = None,
    patches: PatchSpec | None = None,
) -> SplitPlan:
    """The unit grid, the time selection and the anchors of `split`, as `build_loader`
    reads them; an error if revisits do not divide the unit, a time setting is wrong, or
    the split keeps no anchor. A stride that does not fit the grid's units (a stride of 3
    on chunks of 4) is dealt in longer units that hold equally many anchors
    (`core.stride_units`); the split's steps stay the manifest's.

    Args:
        opened: the opened source.
        split: the split's name.
        spec: the user's sample spec (offsets counted in strides), or None.
        revisits: visits per unit and epoch (an int >= 1 dividing the unit length).
        stride: every `stride`-th step an anchor, or None.
        frequency: the anchors' spacing as a duration, or None.
        max_gap: the widest gap between dates an anchor's steps may span, or None.
        patches: the patch spec, or None for whole samples.
    """
    grid = opened.geometry.visits(revisits)
    time = time_selection(opened, spec, stride=stride, frequency=frequency, max_gap=max_gap)
    units = stride_units(grid.unit_length, time.steps, revisits)
    if units.unit_steps != grid.unit_length:
        grid = grid.with_unit_length(units.unit_steps)
    anchors = split_anchors(opened, split, time.spec, patches, time.allowed, grid)
    return SplitPlan(grid, time, anchors, units)


def split_anchors(
    opened: ZarrSource,
    split: str,
    spec: SampleSpec | None,
    patches: PatchSpec | None = None,
    allowed: np.ndarray | None = None,
    geometry: SampleGeometry | None = None,
) -> AnchorSet:
    """The anchors of `split` that `spec` may use; an error if the spec names a variable
    not opened, or if its windows leave no anchor.

    Args:
        opened: the opened source.
        split: the split's name.
        spec: the sample spec (offsets in stored steps), or None for one step per sample.
        patches: the patch spec, or None for whole samples.
        allowed: which steps may be anchors (`builder.time_selection`), or None for every one.
        geometry: the loader's unit grid (`SampleGeometry.visits` of the source's), or
            None for the source's own.
    """
    if spec is not None:
        missing = [v for v in spec.variables() if v not in opened.layouts]
        if missing:
            raise ValueError(
                f"the sample spec names variable(s) {missing} that are not selected; the "
                f"loader has {sorted(opened.layouts)}: add them to variables=[...]"
            )
    anchors = AnchorSet.for_steps(
        opened.geometry if geometry is None else geometry,
        opened.step_ranges(split),
        spec,
        patches,
        allowed=allowed,
    )
    if anchors.units.size == 0:
        lo, hi = spec.span if spec is not None else (0, 0)
        if allowed is not None:
            raise ValueError(
                f"split {split!r} has no anchor that the stride, frequency or max_gap allows "
                f"and whose steps t{lo:+d} .. t{hi:+d} stay inside it; use a larger split, a "
                f"shorter window / lead, or a larger max_gap"
            )
        raise ValueError(
            f"split {split!r} has no anchor whose steps t{lo:+d} .. t{hi:+d} all stay inside "
            f"it: its runs are shorter than the sample spec's span of {hi - lo + 1} steps; "
            f"use a larger split or a shorter window / lead"
        )
    return anchors


def split_mixing(anchors: AnchorSet, batch_size: int) -> UniformMixing:
    """What a uniform global shuffle of the split gives batches of `batch_size`.

    Args:
        anchors: the split's samples.
        batch_size: samples per batch.
    """
    units = anchors.units
    return UniformMixing(anchors.unit_sizes(units), anchors.unit_samples(units), batch_size)
