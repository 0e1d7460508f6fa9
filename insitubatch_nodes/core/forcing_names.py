"""Which forcings exist, and which a loader takes: the registry of names (what each needs:
the time, the grid, real dates) and `build_loader(forcings=...)` checked into a choice, a
list for every batch or a mapping by spec group. Kept apart from `core.forcings`, which
computes them, so the settings, the channel list and the reports check and order names
without the formulas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

COS_SOLAR_ZENITH_ANGLE = "cos_solar_zenith_angle"
TOA_INCIDENT_SOLAR_RADIATION = "toa_incident_solar_radiation"
YEAR_PROGRESS_SIN = "year_progress_sin"
YEAR_PROGRESS_COS = "year_progress_cos"
DAY_PROGRESS_SIN = "day_progress_sin"
DAY_PROGRESS_COS = "day_progress_cos"
COS_LATITUDE = "cos_latitude"
SIN_LONGITUDE = "sin_longitude"
COS_LONGITUDE = "cos_longitude"


@dataclass(frozen=True)
class Forcing:
    """What one forcing needs and is.

    Args:
        name: its name, the batch key it fills.
        needs_time: computed from the valid time (read from the time coordinate).
        needs_grid: computed from the grid's latitude or longitude.
        real_dates: defined only on calendars of real dates (the sun's place).
        units: its units, for the docs.
    """

    name: str
    needs_time: bool
    needs_grid: bool
    real_dates: bool
    units: str


FORCINGS: dict[str, Forcing] = {
    f.name: f
    for f in (
        Forcing(COS_SOLAR_ZENITH_ANGLE, True, True, True, "1"),
        Forcing(TOA_INCIDENT_SOLAR_RADIATION, True, True, True, "J m-2"),
        Forcing(YEAR_PROGRESS_SIN, True, False, False, "1"),
        Forcing(YEAR_PROGRESS_COS, True, False, False, "1"),
        Forcing(DAY_PROGRESS_SIN, True, True, False, "1"),
        Forcing(DAY_PROGRESS_COS, True, True, False, "1"),
        Forcing(COS_LATITUDE, False, True, False, "1"),
        Forcing(SIN_LONGITUDE, False, True, False, "1"),
        Forcing(COS_LONGITUDE, False, True, False, "1"),
    )
}


def check_forcing_names(names: Iterable[str] | None) -> tuple[str, ...]:
    """`names` as a tuple, in the order given, or an error naming the unknown or repeated
    one and listing the known ones.

    Args:
        names: forcing names (`FORCINGS`), or None for none.
    """
    if names is None:
        return ()
    if isinstance(names, str):
        raise TypeError(f"forcings must be a list of names, got the string {names!r}")
    chosen = tuple(names)
    for name in chosen:
        if name not in FORCINGS:
            raise ValueError(f"unknown forcing {name!r}; the known forcings are {sorted(FORCINGS)}")
    repeated = sorted({n for n in chosen if chosen.count(n) > 1})
    if repeated:
        raise ValueError(f"forcings lists {repeated} more than once; name each once")
    return chosen


ForcingChoice = tuple[str, ...] | dict[str, tuple[str, ...]]  # every group's, or by group


def check_forcings(given: Any, groups: Sequence[str] | None) -> ForcingChoice:
    """`build_loader(forcings=...)` checked: a list of names (every group of a spec takes
    each, as every batch without one) as a tuple, or, with a spec, a mapping of some of
    its groups to their names (`{"inputs": [...]}`: the other groups take none) as a dict
    of tuples in the spec's order of groups, without the groups given none. Refused by
    name: an unknown or repeated forcing, a mapping without a spec, a group the spec does
    not have.

    Args:
        given: the names, a mapping of group names to names, or None for none.
        groups: the spec's group names, or None without a spec.
    """
    if not isinstance(given, Mapping):
        return check_forcing_names(given)
    if groups is None:
        raise ValueError(
            f"forcings={dict(given)!r} names groups of a spec, and there is no spec=; pass "
            f"a list of names (every batch takes each), or a spec whose groups those are"
        )
    unknown = sorted(str(group) for group in given if group not in groups)
    if unknown:
        raise ValueError(
            f"forcings= names the groups {unknown}, which the spec does not have (its "
            f"groups are {list(groups)}); key the forcings by the spec's group names"
        )
    chosen = {group: check_forcing_names(given[group]) for group in groups if group in given}
    return {group: names for group, names in chosen.items() if names}


def chosen_names(choice: ForcingChoice) -> tuple[str, ...]:
    """Every forcing of `choice`, once each, in the order they first appear.

    Args:
        choice: checked forcings (`check_forcings`).
    """
    if not isinstance(choice, Mapping):
        return tuple(choice)
    return tuple(dict.fromkeys(name for names in choice.values() for name in names))


def group_forcings(choice: ForcingChoice, group: str | None) -> tuple[str, ...]:
    """The forcings `group` takes (None: the batch without a spec, which takes a list's).

    Args:
        choice: checked forcings (`check_forcings`).
        group: a spec's group name, or None (or the stacked key) without a spec.
    """
    if not isinstance(choice, Mapping):
        return tuple(choice)
    return choice.get(group, ()) if group is not None else ()
