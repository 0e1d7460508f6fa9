"""Which store of a join holds each variable, and which variables are static fields.

Stores joined on time need not name time alike: a WeatherBench2 store calls it `time`,
the CDS's ERA5 downloads `valid_time`. So each store is read by its own time coordinate
(`io.metadata.time_dimension.named_time` of that store alone): a variable is a field
when it has its store's time dimension (first, checked), and a static field when it
names dimensions without it. A store that names no time (static fields only) is judged
by the time dimensions of the other stores, as `xr.merge` would align it on them. Pooling
every store's arrays into one group instead would see two time coordinates and refuse.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import zarr

from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.io.joined_picks import StoreArrays
from insitubatch_nodes.io.metadata.array_metadata import check_torch_dtypes
from insitubatch_nodes.io.metadata.dimensions import dimension_names
from insitubatch_nodes.io.metadata.time_dimension import (
    check_static_grid,
    named_time,
    time_dimension,
)
from insitubatch_nodes.io.metadata.zarr_layout import layout_of, select_variables


@dataclass(frozen=True)
class JoinedSelection:
    """The variables a join loads, each with the store it is read from.

    Args:
        fields: the time-varying variables' layouts, in the order asked.
        statics: the static fields' layouts, in the order asked.
        owner: variable or static field -> the position of its store in the join.
        left_out: static fields the default choice of variables left out.
    """

    fields: dict[str, VariableLayout]
    statics: dict[str, VariableLayout]
    owner: dict[str, int]
    left_out: tuple[str, ...]


def is_timed(arrays: Mapping[str, zarr.Array]) -> bool:
    """Whether some array of a store is read along a time coordinate (else the store
    holds static fields only, and joins by grid alone).

    Args:
        arrays: the store's arrays by name.
    """
    data = [n for n, a in arrays.items() if a.ndim >= 2]
    return bool(data) and named_time(arrays, data) is not None


def select_joined(
    stores: Sequence[StoreArrays],
    variables: Sequence[str] | str | None,
    where: str,
    spatial_dims: int,
) -> JoinedSelection:
    """The variables to load across `stores`, each found in one store, or the first
    refusal: an unknown name, a name listed twice or held by two stores, a field whose
    time is not its first axis, a static field off the fields' grid.

    Args:
        stores: the join's stores, in order.
        variables: the arrays to load by name, or None for each store's default choice
            (a store of static fields only gives none by default).
        where: how messages name the join.
        spatial_dims: the trailing grid axes a static field must match.
    """
    names, left_out = _names(stores, variables, where)
    owner = {name: next(i for i, s in enumerate(stores) if name in s.arrays) for name in names}
    used = sorted(set(owner.values()))
    held = {i: [n for n in names if owner[n] == i] for i in used}
    times = {i: named_time(stores[i].arrays, held[i]) for i in used}
    known = {t for t in times.values() if t is not None}
    static: set[str] = set()
    for i in used:
        arrays = stores[i].arrays
        check_torch_dtypes({n: arrays[n] for n in held[i]})
        store_times = {times[i]} if times[i] is not None else known
        static |= {
            n
            for n in held[i]
            if store_times and (dims := dimension_names(arrays[n])) is not None
            if not store_times & set(dims)
        }
        if times[i] is None:
            _check_untimed(stores[i], [n for n in held[i] if n in static], spatial_dims)
        time_dimension(arrays, [n for n in held[i] if n not in static])  # time first, by name
    pooled = {n: stores[owner[n]].arrays[n] for n in names}
    fields = [n for n in names if n not in static]
    check_static_grid(pooled, [n for n in names if n in static], fields, spatial_dims)
    return JoinedSelection(
        {n: layout_of(pooled[n]) for n in fields},
        {n: layout_of(pooled[n]) for n in names if n in static},
        owner,
        left_out,
    )


def _check_untimed(store: StoreArrays, statics: Sequence[str], spatial_dims: int) -> None:
    """Refuse a variable of a store that names no time coordinate when it has more axes
    than a grid: it varies along something, and a join aligns stores by their dates."""
    for name in statics:
        dims = dimension_names(store.arrays[name]) or ()
        if len(dims) > spatial_dims:
            raise ValueError(
                f"{store.where} has no time coordinate for {name!r} (dimensions {dims}): a "
                f"join aligns its stores on their time coordinates by value; write one (a 1-D "
                f"array of dates named by the variable's first dimension, as xarray's "
                f"to_zarr writes it), or leave {name!r} out of variables="
            )


def _names(
    stores: Sequence[StoreArrays], variables: Sequence[str] | str | None, where: str
) -> tuple[list[str], tuple[str, ...]]:
    """The arrays to load: the named ones, or each timed store's default choice, and the
    static fields the default left out; a name two stores hold is refused, naming both."""
    left_out: list[str] = []
    if variables is None:
        names: list[str] = []
        for store in stores:
            if is_timed(store.arrays):
                chosen = select_variables(store.arrays, None, store.where)
                names += list(chosen.fields)
                left_out += chosen.statics_left_out
            else:
                left_out += sorted(n for n, a in store.arrays.items() if a.ndim >= 2)
    else:
        names = [variables] if isinstance(variables, str) else list(variables)
        twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if twice is not None:
            raise ValueError(f"variables lists {twice!r} twice; name each array once")
        unknown = [n for n in names if not any(n in s.arrays for s in stores)]
        if unknown:
            found = sorted({n for s in stores for n in s.arrays})
            raise ValueError(f"unknown variable(s) {unknown} in {where}; its arrays are {found}")
    for name in names:
        holders = [s.where for s in stores if name in s.arrays]
        if len(holders) > 1:
            raise ValueError(
                f"{name!r} is an array of {holders[0]} and of {holders[1]}: a join looks "
                f"variables up by name, so a name may be in one store only; leave one "
                f"store's {name!r} out (select variables= from the others), or rename it"
            )
    return names, tuple(left_out)
