"""An xarray Dataset as the source: read the Zarr store it was opened from, in place,
with its selection applied.

Users open stores with xarray and select what they train on: `xr.open_zarr(url)`, then
`.sel(time=slice("1979", "2015"), level=[500, 850])[["temperature", "geopotential"]]`.
`build_loader(ds)` maps that back to the store and to the loader's own settings (what
each selection took, found in the store's coordinates: `io.dataset_selection`), and
reads the chunks directly (never through xarray or dask):

- the variables are the Dataset's data variables, in its order; each must be a stored
  array of the store, with its dimensions in the stored order and the stored dtype; one
  without the time dimension is a static field (`core.static_fields`), read whole and
  cropped with the fields' region;
- a time selection is a split of its own (`split=` names it): a run of steps is the date
  range of its first and last step (`splits=`, in the store's calendar: cftime dates of a
  `noleap` or `360_day` axis too), a run with a step of k (`isel(time=
  slice(s, e, k))`, s a multiple of k) is that range with `stride=k`;
- a level selection is `levels=`, in the Dataset's order (`.sel(level=[500, 850])` on a
  store that keeps levels descending yields 500 then 850, as the Dataset holds them);
- its values as it shows them: decoded (`xr.open_zarr`'s default) or, opened with
  `mask_and_scale=False`, stored ones (`decode_cf=False`);
- a run of the grid's positions (`isel(lat=slice(a, b))`, or `sel` of a coordinate
  range) crops every sample to that region (`patches=PatchSpec(..., mode="region")`):
  only the chunks the region touches are read.

Anything else cannot be read from stored chunks and is refused, saying what to do: a
Dataset not opened from a Zarr store, a computed variable (arithmetic, `astype`, a
cast), a renamed or transposed variable, a time selection that is not a (strided) run,
grid positions that are not one run. xarray is imported only if the caller already has:
the loader works without it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import zarr

from insitubatch_nodes.core.date_ranges import TimeAxis
from insitubatch_nodes.core.patches import PatchSpec
from insitubatch_nodes.io.dataset_selection import (
    StoredCoordinates,
    grid_region,
    grid_selection,
    level_selection,
    selected_axis,
    time_selection,
)
from insitubatch_nodes.io.metadata.cf_attributes import CF_ATTRIBUTES, read_cf_decoding
from insitubatch_nodes.io.metadata.dimensions import dimension_names
from insitubatch_nodes.io.metadata.time_dimension import (
    check_static_grid,
    named_time,
    static_variables,
    time_dimension,
)
from insitubatch_nodes.io.metadata.zarr_layout import arrays_of, open_root_group
from insitubatch_nodes.io.stores.open_store import describe, open_store
from insitubatch_nodes.io.stores.redact import secrets_in

_STORED = ("chunks", "preferred_chunks")  # encoding keys of a variable read from Zarr


def _shows_stored_values(variable: Any) -> bool:
    """Whether xarray left `variable` undecoded (`mask_and_scale=False`): the CF
    attributes it decodes by are then still attributes."""
    return any(key in variable.attrs for key in CF_ATTRIBUTES)


def is_dataset(source: object) -> bool:
    """True for an `xarray.Dataset` (without importing xarray: if the caller has a
    Dataset, xarray is imported already).

    Args:
        source: what `build_loader` was given.
    """
    xarray = sys.modules.get("xarray")
    return xarray is not None and isinstance(source, xarray.Dataset)


@dataclass(frozen=True)
class DatasetRequest:
    """A Dataset's selection as the loader's settings.

    Args:
        url: the store the Dataset was opened from (`ds.encoding["source"]`).
        variables: its data variables, in order.
        dates: (first, last) dates of a time selection, or None when time is whole.
        stride: the step of a strided time selection (1 for a run).
        levels: variable -> level values in the Dataset's order, for the variables whose
            levels are selected.
        region: the crop a spatial selection makes of the grid (the trailing axes), or
            None when the grid is whole.
        decode_cf: whether it shows decoded values (False: opened with
            `mask_and_scale=False`).
        span: the first and last selected date as `TimeAxis.dates` counts them (to
            compare selections of several Datasets), or None when time is whole.
        times: the Dataset's time coordinate, or None when it has none (a Dataset of
            static fields, or time without a coordinate).
    """

    url: str
    variables: list[str]
    dates: tuple[str, str] | None = None
    stride: int = 1
    levels: dict[str, list[Any]] = field(default_factory=dict)
    region: PatchSpec | None = None
    decode_cf: bool = True
    span: tuple[np.datetime64, np.datetime64] | None = None
    times: TimeAxis | None = field(default=None, repr=False, compare=False)

    def decoding_settings(self, decode_cf: bool) -> dict[str, Any]:
        """`build_loader`'s `decode_cf` for this Dataset: its own, refusing a decoded
        Dataset read as stored values.

        Args:
            decode_cf: the `decode_cf` passed beside the Dataset.
        """
        if self.decode_cf and not decode_cf:
            raise ValueError(
                "decode_cf=False and the Dataset shows decoded values (opened with "
                "xr.open_zarr's default mask_and_scale=True): open it with "
                "mask_and_scale=False to read stored values, or leave decode_cf alone"
            )
        return {"decode_cf": self.decode_cf}

    def settings(
        self,
        split: str,
        given: Mapping[str, Any],
    ) -> dict[str, Any]:
        """`build_loader`'s keyword arguments for this request, refusing a setting given
        both ways.

        Args:
            split: the split the loader reads (it names the time selection).
            given: the settings passed beside the Dataset (variables, splits, manifest,
                levels, stride, frequency, patches), None where not given.
        """
        chosen: dict[str, Any] = {"variables": self.variables}
        if given.get("variables") is not None and list(given["variables"]) != self.variables:
            raise ValueError(
                f"variables={list(given['variables'])} and the Dataset's data variables "
                f"{self.variables} differ: select the variables in one place (ds[[...]])"
            )
        if self.dates is not None:
            for key in ("splits", "manifest"):
                if given.get(key) is not None:
                    raise ValueError(
                        f"the Dataset selects time ({self.dates[0]} .. {self.dates[1]}) and "
                        f"{key}= is given too: select time in one place (the Dataset's "
                        f"selection is split {split!r}), or pass the whole time axis"
                    )
            chosen["splits"] = {split: self.dates}
        if self.stride > 1:
            if given.get("stride") is not None or given.get("frequency") is not None:
                raise ValueError(
                    f"the Dataset selects every {self.stride}th step and stride= or "
                    f"frequency= is given too: select the stride in one place"
                )
            chosen["stride"] = self.stride
        if self.levels:
            if given.get("levels") is not None:
                raise ValueError(
                    "the Dataset selects levels and levels= is given too: select levels in "
                    "one place"
                )
            chosen["levels"] = self.levels
        if self.region is not None:
            if given.get("patches") is not None:
                raise ValueError(
                    "the Dataset selects part of the grid and patches= is given too: crop in "
                    "one place (select the whole grid to draw patches from it)"
                )
            chosen["patches"] = self.region
        return chosen


def dataset_request(
    ds: Any,
    *,
    storage_options: dict[str, Any] | None = None,
    spatial_dims: int = 2,
    joined: bool = False,
) -> DatasetRequest:
    """What `ds` selects of the store it was opened from, or an error saying what cannot
    be read from stored chunks and what to do.

    Args:
        ds: an `xarray.Dataset` from `xr.open_zarr` (or `open_dataset(engine="zarr")`),
            possibly after `.sel`/`.isel` and a variable subset.
        storage_options: object-store client options to open its store with.
        spatial_dims: the trailing grid axes (a level axis lies before them).
        joined: whether `ds` is one of several joined (`io.xarray_join`): then a store that
            names no time dimension for the selected variables holds static fields only,
            joined by grid alone, as `io.joined_source` takes such a store.
    """
    url = ds.encoding.get("source")
    if not isinstance(url, str):
        raise ValueError(
            "this Dataset does not say which Zarr store it was opened from (ds.encoding has "
            "no 'source': it was not opened with xr.open_zarr, or an operation such as "
            "assign, merge or astype dropped it): build_loader reads Zarr stores in place; open it "
            "with xr.open_zarr(url) and select from that, write it with ds.to_zarr(url) "
            "first, or pass the store's URL or Store as the source"
        )
    names = [str(n) for n in ds.data_vars]
    if not names:
        raise ValueError("the Dataset has no data variables: select at least one")
    secrets = secrets_in(storage_options, url)
    where = describe(url, secrets)
    store = open_store(url, storage_options)
    arrays = arrays_of(open_root_group(store, where, secrets), where, secrets)
    decode_cf = not any(_shows_stored_values(ds[name]) for name in names)
    for name in names:
        _check_stored(ds[name], name, arrays, where, decode_cf)
    statics = static_variables(arrays, names)  # read whole, beside the fields
    if joined and named_time(arrays, names) is None:
        statics = list(names)  # a store of static fields only
    fields = [n for n in names if n not in statics]
    if fields or not joined:  # a join checks its grids across stores (`joined_source`)
        check_static_grid(arrays, statics, fields, spatial_dims)
    time_dimension(arrays, fields)  # time first in each, by name, as by URL (else refused)
    dates, stride, span, times = None, 1, None, None
    if fields:  # else static fields only: a store of a join that joins by grid alone
        time_dim = ds[fields[0]].dims[0]
        length = arrays[fields[0]].shape[0]
        dates, stride, span = time_selection(ds, time_dim, arrays, fields, length, where, secrets)
        if time_dim in ds.coords:
            times = selected_axis(np.asarray(ds[time_dim].values), str(time_dim))
    levels = {}
    crops: dict[str, tuple[int, int]] = {}  # spatial dim -> (start, length) when cropped
    read = StoredCoordinates(arrays, where, secrets)
    for name in names:
        dims = ds[name].dims
        first = 0 if name in statics else 1  # a static's axes are all grid
        for axis, dim in enumerate(dims[first:], start=first):
            size = arrays[name].shape[axis]
            if axis < len(dims) - spatial_dims:
                kept = level_selection(ds, name, dim, read, size)
                if kept is not None:
                    levels[name] = kept
            else:
                crop = grid_selection(ds, name, dim, read, size)
                if crop is not None:
                    crops[str(dim)] = crop
    region = grid_region(ds, names, arrays, crops, spatial_dims)
    return DatasetRequest(url, names, dates, stride, levels, region, decode_cf, span, times)


def _check_stored(
    variable: Any, name: str, arrays: Mapping[str, zarr.Array], where: str, decode_cf: bool
) -> None:
    encoding = variable.encoding
    if not all(key in encoding for key in _STORED):
        raise ValueError(
            f"the Dataset's variable {name!r} is not read from the store as it is (computed: "
            f"arithmetic, astype, a reindex or a dask graph): the loader reads stored chunks "
            f"only; select stored variables and transform batches in your training step"
        )
    if name not in arrays:
        raise ValueError(
            f"the Dataset's variable {name!r} is not an array of {where} (renamed?); its "
            f"arrays are {sorted(arrays)}: select variables by their stored names"
        )
    stored = dimension_names(arrays[name])
    dropped = [dim for dim in stored or () if dim not in variable.dims]
    if dropped and [dim for dim in stored or () if dim in variable.dims] == list(variable.dims):
        raise ValueError(
            f"the Dataset's variable {name!r} selects one value of "
            f"{', '.join(map(repr, dropped))} (a scalar sel or isel drops the dimension), "
            f"and the loader reads whole stored dimensions: select a list, e.g. "
            f"ds.sel({dropped[0]}=[...]), to keep it"
        )
    if stored is not None and tuple(variable.dims) != stored:
        raise ValueError(
            f"the Dataset's variable {name!r} has dimensions {tuple(variable.dims)}, stored "
            f"as {stored}: the loader reads the stored order; do not transpose it (move axes "
            f"in your training step)"
        )
    decoding = read_cf_decoding(name, arrays[name], decode_cf=decode_cf)
    if np.dtype(variable.dtype) != np.dtype(decoding.decoded_dtype):
        shown = "decoded" if decode_cf else "stored"
        raise ValueError(
            f"the Dataset's variable {name!r} is {variable.dtype}, and its {shown} values "
            f"are {decoding.decoded_dtype} (stored as {arrays[name].dtype}): it was cast or "
            f"decoded with other options, which the loader cannot read in place; open the "
            f"store with xr.open_zarr's default decoding (or mask_and_scale=False for "
            f"stored values) and cast batches with build_loader(dtype=...)"
        )
