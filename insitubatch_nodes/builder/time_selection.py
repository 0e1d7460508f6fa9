"""`build_loader`'s `stride`, `frequency` and `max_gap`: the spec in stored steps, and
which steps may be anchors (`core.time_steps` holds the rules; this reads the time
coordinate they need and checks the settings together)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass

import numpy as np

from insitubatch_nodes.core.sample_spec import SampleSpec
from insitubatch_nodes.core.settings import as_optional_int
from insitubatch_nodes.core.time_steps import (
    duration,
    every_kth,
    on_frequency,
    steps_per,
    without_gaps,
)
from insitubatch_nodes.io.zarr_source import ZarrSource

Duration = str | datetime.timedelta | np.timedelta64


@dataclass(frozen=True, eq=False)
class TimeSelection:
    """What the loader's time settings come to.

    Args:
        spec: the sample spec with offsets in stored steps (None without one).
        allowed: a bool per step: which may be anchors, or None for every one.
        steps: stored steps per unit of the spec's offsets (the stride).
    """

    spec: SampleSpec | None
    allowed: np.ndarray | None
    steps: int = 1


def time_selection(
    opened: ZarrSource,
    spec: SampleSpec | None,
    *,
    stride: int | None = None,
    frequency: Duration | None = None,
    max_gap: Duration | None = None,
) -> TimeSelection:
    """The spec in stored steps and the steps allowed as anchors under `stride` or
    `frequency`, and `max_gap`.

    Args:
        opened: the opened source (its time coordinate is read for `frequency` and
            `max_gap`).
        spec: the user's sample spec, offsets in units of the stride, or None.
        stride: keep every `stride`-th step (counted from the store's first) as an anchor.
        frequency: keep the steps at the first date plus a whole number of it ("6h").
        max_gap: drop anchors whose window or leads span neighbouring dates further apart.
    """
    stride = as_optional_int("stride", stride, minimum=1)
    if stride is not None and frequency is not None:
        raise ValueError(
            "give stride= or frequency=, not both: frequency='6h' is the stride of 6 steps "
            "on an hourly store, found from its time coordinate"
        )
    if stride is None and frequency is None and max_gap is None:
        return TimeSelection(spec, None)
    num_steps = opened.geometry.num_samples
    steps, allowed = stride or 1, None
    axis = opened.time_axis() if frequency is not None or max_gap is not None else None
    if frequency is not None:
        assert axis is not None
        every = duration(frequency, "frequency")
        steps = steps_per(every, axis.dates, axis.name)
        allowed = on_frequency(axis.dates, every)
    elif stride is not None:
        allowed = every_kth(num_steps, stride)
    scaled = spec.scaled(steps) if spec is not None and steps > 1 else spec
    if max_gap is not None:
        assert axis is not None
        span = scaled.span if scaled is not None else (0, 0)
        kept = without_gaps(axis.dates, span, duration(max_gap, "max_gap"))
        allowed = kept if allowed is None else allowed & kept
    return TimeSelection(scaled, allowed, steps)
