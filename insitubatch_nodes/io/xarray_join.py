"""Several xarray Datasets as one source: each read from its own store with its own
selection, then joined as `xr.merge(datasets, join=...)` joins them.

A user who opens the CDS's pressure-level and surface downloads with xarray selects on
each (`xr.open_zarr(pl).sel(level=[500, 850])[["t"]]`, `xr.open_zarr(sfc)[["t2m"]]`) and
merges them. `build_loader([ds_pl, ds_sfc])` maps that to a join of the stores they were
opened from (`io.joined_source`) with the Datasets' selections as the loader's settings
(`io.xarray_source.dataset_request`, one Dataset at a time):

- the variables are every Dataset's data variables, in the order of the list; a name in
  two Datasets is refused;
- Datasets opened from one store (`ds[["t"]]`, `ds[["u"]].sel(level=[500])`) read it as
  one store, once per chunk, each Dataset's selection applying to its own variables;
- levels: each variable's own where the Datasets agree; where two Datasets hold a level
  dimension with different values, `xr.merge` aligns them: under `join="exact"` that is
  refused (the first values that differ are named), under `"inner"` every variable along
  it keeps the levels all of them hold, in the first Dataset's order (none in common is
  refused: a batch of no levels);
- time: under `join="exact"` the Datasets' time coordinates must be equal, as
  `xr.merge(join="exact")` requires (the first dates that differ are named); under
  `"inner"` the joined steps are the dates every Dataset holds. A Dataset that selects a
  run of dates (`.sel(time=slice(...))`) makes the loader's split that run: the stores are
  joined `"inner"` and the split is the period every Dataset selects, so the loader holds
  the dates `xr.merge` holds, whichever stores hold more;
- a crop of the grid must be the same on every Dataset that crops (under `"exact"`, on
  every Dataset): one grid;
- all decoded, or all opened with `mask_and_scale=False`.

A strided time selection, a list mixing Datasets with URLs, and Datasets that disagree
as above are refused, saying what to do.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitubatch_nodes.core.level_join import join_levels
from insitubatch_nodes.core.time_join import check_join_policy
from insitubatch_nodes.io.joined_source import options_per_store
from insitubatch_nodes.io.stores.open_store import describe
from insitubatch_nodes.io.stores.redact import secrets_in
from insitubatch_nodes.io.xarray_source import DatasetRequest, dataset_request, is_dataset


def holds_datasets(sources: Sequence[Any]) -> bool:
    """Whether a list given as `source=` holds xarray Datasets.

    Args:
        sources: the list's items.
    """
    return any(is_dataset(one) for one in sources)


@dataclass(frozen=True)
class JoinedDatasets:
    """What a list of Datasets asks of the loader.

    Args:
        request: what the Datasets select of their stores, as one request.
        urls: the stores, each once, in the order their first Dataset comes.
        storage_options: each store's options, aligned with `urls`.
        join: how the stores are aligned on time (`"inner"` where a Dataset selects dates,
            see the module).
    """

    request: DatasetRequest
    urls: list[str]
    storage_options: list[dict[str, Any] | None]
    join: str


def joined_dataset_request(
    datasets: Sequence[Any],
    *,
    storage_options: Any = None,
    spatial_dims: int = 2,
    join: str = "exact",
) -> JoinedDatasets:
    """What the Datasets select of their stores, the stores and the join they are read
    under (see the module), or an error naming what cannot be read so.

    Args:
        datasets: xarray Datasets, each opened from a Zarr store (`xr.open_zarr`) and
            possibly selected from.
        storage_options: one dict for every store, or a list of one dict (or None) per
            Dataset, in order.
        spatial_dims: the trailing grid axes.
        join: `"exact"` or `"inner"`, as `xr.merge` takes it.
    """
    join = check_join_policy(join)
    if not all(is_dataset(one) for one in datasets):
        kinds = [type(one).__name__ for one in datasets]
        raise ValueError(
            f"source is a list of {kinds}: a join takes either xarray Datasets or stores "
            f"(URLs, paths, zarr Stores), not both; open each store with xr.open_zarr, or "
            f"pass every store by URL"
        )
    options = options_per_store(storage_options, len(datasets))
    _check_each_variable_once(datasets)
    requests = [
        dataset_request(ds, storage_options=o, spatial_dims=spatial_dims, joined=True)
        for ds, o in zip(datasets, options, strict=True)
    ]
    for i, request in enumerate(requests):
        if request.stride > 1:
            raise ValueError(
                f"Dataset {i} of source takes one step in every {request.stride}: on a join, "
                f"select a run of dates on each Dataset and pass stride= (or frequency=) "
                f"beside the list"
            )
    if len({r.decode_cf for r in requests}) > 1:
        raise ValueError(
            "some Datasets of source show decoded values and some stored ones (opened with "
            "mask_and_scale=False): open them all the same way"
        )
    wheres = [  # the stores as messages name them: credentials redacted
        describe(r.url, secrets_in(o, r.url)) for r, o in zip(requests, options, strict=True)
    ]
    if join == "exact":
        _check_same_times(requests, wheres)
    dates = _common_dates(requests, wheres)
    levels = {name: kept for r in requests for name, kept in r.levels.items()}
    levels |= _merged_levels(datasets, requests, wheres, join, spatial_dims)
    request = DatasetRequest(
        url=requests[0].url,
        variables=[name for r in requests for name in r.variables],
        dates=dates,
        levels=levels,
        region=_common_region(requests, join),
        decode_cf=requests[0].decode_cf,
    )
    stores_join = "inner" if dates is not None else join
    urls, store_options = _stores(requests, options, wheres)
    return JoinedDatasets(request, urls, store_options, stores_join)


def _check_same_times(requests: Sequence[DatasetRequest], wheres: Sequence[str]) -> None:
    """Refuse Datasets whose time coordinates differ, as `xr.merge(join="exact")` does,
    naming the first pair and the first dates that differ."""
    timed = [(i, r.times) for i, r in enumerate(requests) if r.times is not None]
    for (i, first), (j, other) in itertools.pairwise(timed):
        mine, theirs = first.dates, other.dates
        same = first.calendar == other.calendar and mine.size == theirs.size
        if same and np.array_equal(mine, theirs.astype(mine.dtype)):
            continue
        shared = min(mine.size, theirs.size)
        unequal = np.flatnonzero(mine[:shared] != theirs[:shared].astype(mine.dtype))
        at = int(unequal[0]) if unequal.size else shared
        texts = [
            axis.text(axis.dates[at : at + 1])[0] if at < axis.dates.size else "nothing (it ends)"
            for axis in (first, other)
        ]
        raise ValueError(
            f"the time coordinates of Dataset {i} ({wheres[i]}, {mine.size} steps) and "
            f"Dataset {j} ({wheres[j]}, {theirs.size} steps) differ at their step {at}: "
            f"{texts[0]} and {texts[1]}; join='exact' takes Datasets whose dates are equal, "
            f"as xr.merge(join='exact') does: select the same dates on each, or pass "
            f"join='inner'"
        )


def _common_dates(
    requests: Sequence[DatasetRequest], wheres: Sequence[str]
) -> tuple[str, str] | None:
    """The period every Dataset that selects dates selects (first, last as its store
    writes them), or None when none selects dates."""
    selected = [(r.span, r.dates, w) for r, w in zip(requests, wheres, strict=True)]
    runs = [(span, dates, w) for span, dates, w in selected if span and dates]
    if not runs:
        return None
    start = max(runs, key=lambda run: run[0][0])
    stop = min(runs, key=lambda run: run[0][1])
    if start[0][0] > stop[0][1]:
        raise ValueError(
            f"the Datasets' time selections share no date: one starts at {start[1][0]} "
            f"({start[2]}) after another ends at {stop[1][1]} ({stop[2]}); select periods "
            f"that overlap"
        )
    return start[1][0], stop[1][1]


def _common_region(requests: Sequence[DatasetRequest], join: str) -> Any:
    """The one crop of the grid the Datasets select, or None for the whole grid."""
    crops = [r.region for r in requests if r.region is not None]
    if not crops:
        return None
    differ = any(c != crops[0] for c in crops[1:])
    if differ or (join == "exact" and len(crops) < len(requests)):
        raise ValueError(
            "the Datasets of source crop the grid differently: joined Datasets share one "
            "grid; crop each the same way (.isel/.sel of the same positions), or select the "
            "whole grid on each and pass area= beside the list"
        )
    return crops[0]


def _check_each_variable_once(datasets: Sequence[Any]) -> None:
    """Refuse a data variable two Datasets hold: the loader reads each variable once, from
    one selection."""
    seen: dict[str, int] = {}
    for i, ds in enumerate(datasets):
        for name in map(str, ds.data_vars):
            if name in seen:
                raise ValueError(
                    f"{name!r} is a data variable of Dataset {seen[name]} and of Dataset {i} "
                    f"of source: the loader reads each variable from one Dataset; select "
                    f"it in one of them only (ds[[...]])"
                )
            seen[name] = i


def _stores(
    requests: Sequence[DatasetRequest],
    options: Sequence[dict[str, Any] | None],
    wheres: Sequence[str],
) -> tuple[list[str], list[dict[str, Any] | None]]:
    """Each store once, in the order its first Dataset comes, with its options: Datasets
    opened from one store read it as one store. Refused: one store given two sets of
    options (which would the loader read it with?)."""
    urls: list[str] = []
    chosen: list[dict[str, Any] | None] = []
    for i, (request, option) in enumerate(zip(requests, options, strict=True)):
        if request.url not in urls:
            urls.append(request.url)
            chosen.append(option)
            continue
        first = urls.index(request.url)
        if (chosen[first] or {}) != (option or {}):
            raise ValueError(
                f"Dataset {i} of source is opened from {wheres[i]}, as an earlier Dataset is, "
                f"with other storage_options: the loader reads a store once, with one set "
                f"of options; give both Datasets the same"
            )
    return urls, chosen


def _merged_levels(
    datasets: Sequence[Any],
    requests: Sequence[DatasetRequest],
    wheres: Sequence[str],
    join: str,
    spatial_dims: int,
) -> dict[str, list[Any]]:
    """The levels `xr.merge` aligns the Datasets' variables on, where their level
    coordinates differ (see the module); empty where they agree. A level axis lies
    between time and the grid, and is compared by its coordinate's values, in order."""
    along: dict[str, list[str]] = {}  # level dimension -> the variables along it
    held: dict[str, list[tuple[int, list[Any]]]] = {}  # -> (Dataset, its values), each once
    for i, (ds, request) in enumerate(zip(datasets, requests, strict=True)):
        for name in request.variables:
            dims = ds[name].dims
            for dim in dims[1 : max(1, len(dims) - spatial_dims)]:
                along.setdefault(str(dim), []).append(name)
                if dim not in ds.indexes:  # no coordinate: xr.merge compares sizes alone
                    continue
                mine = held.setdefault(str(dim), [])
                if all(j != i for j, _ in mine):
                    mine.append((i, ds.indexes[dim].tolist()))
    levels: dict[str, list[Any]] = {}
    for dim, found in held.items():
        labelled = [(f"Dataset {i} ({wheres[i]})", values) for i, values in found]
        remedy = f"select the same {dim!r} values on each"
        kept = join_levels(dim, labelled, join, "Datasets", remedy)
        if kept is not None:
            levels |= {name: list(kept) for name in along[dim]}
    return levels
