"""A list of xarray Datasets as the source (issue 37): each Dataset's selection (variables,
levels, a run of dates, a crop) applies to its own store, then the stores are joined as
`xr.merge(datasets, join=...)` joins the Datasets. Every sample equals that merge at its
date; what the merge would refuse, or what stored chunks cannot give, is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from insitubatch_nodes import build_loader
from tests.helpers.batches import as_numpy, batch_key
from tests.helpers.joined_stores import (
    cds_named,
    dates,
    era5_join,
    pressure_levels,
    surface,
    write,
)

pytestmark = pytest.mark.filterwarnings("ignore")  # xarray's and zarr's notes on Zarr v3


def opened(url: str) -> xr.Dataset:
    return xr.open_zarr(url)


def as_time(ds: xr.Dataset) -> xr.Dataset:
    """`ds` with a CDS-style `valid_time` named `time`, as a user renames it to merge."""
    return ds.rename(valid_time="time") if "valid_time" in ds.dims else ds


def epoch(datasets: list[xr.Dataset], **settings: Any) -> list[dict[str, Any]]:
    settings = {"batch_size": 6, "seed": 4, "device": "cpu", **settings}
    return list(build_loader(datasets, **settings))


def check_against_merge(
    batches: list[dict[str, Any]], urls: list[str], reference: xr.Dataset, names: list[str]
) -> list[np.datetime64]:
    """Each batch's variables equal `reference` at their samples' dates (`sample_index`
    counts steps of the stores' joined axis, the inner merge of the whole stores); the
    dates seen, in order."""
    whole = [as_time(opened(u)) for u in urls]
    axis = xr.merge(whole, join="inner").time.values
    seen: list[np.datetime64] = []
    for batch in batches:
        when = axis[as_numpy(batch["sample_index"])]
        for name in names:
            expected = reference[name].sel(time=when).values
            np.testing.assert_array_equal(as_numpy(batch[name]), expected, err_msg=name)
        seen += list(when)
    return seen


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_datasets_with_their_own_selections_yield_their_inner_merge(
    tmp_path: Path, zarr_format: int
) -> None:
    """The pressure store starts 10 steps early, its Dataset keeps two levels of `t` over
    a run of dates; the surface and static Datasets are whole: every date the merge holds
    is a sample, once, with its values, and the static field in every batch."""
    urls = era5_join(tmp_path, zarr_format=zarr_format, pressure=(0, 72), surface_steps=(10, 57))
    run = dates(0, 72)[[20, 50]]
    pl = opened(urls[0]).sel(level=[500, 850], time=slice(*run))[["t"]]
    sfc = opened(urls[1])[["t2m", "msl"]]
    static = opened(urls[2])[["lsm"]]
    reference = xr.merge([pl, sfc, static], join="inner")
    assert reference.sizes["time"] == 31 and list(reference.level.values) == [500, 850]
    batches = epoch([pl, sfc, static], join="inner", split="train")
    seen = check_against_merge(batches, urls, reference, ["t", "t2m", "msl"])
    assert sorted(seen) == list(reference.time.values)
    for batch in batches:
        np.testing.assert_array_equal(as_numpy(batch["lsm"])[0], reference.lsm.values)


def test_the_inner_merge_of_two_runs_is_the_period_both_select(tmp_path: Path) -> None:
    urls = era5_join(tmp_path, pressure=(0, 60), surface_steps=(0, 60))
    days = dates(0, 60)
    pl = opened(urls[0]).sel(time=slice(days[5], days[40]))[["z"]]
    sfc = opened(urls[1]).sel(time=slice(days[30], days[55]))[["t2m"]]
    reference = xr.merge([pl, sfc], join="inner")
    batches = epoch([pl, sfc], join="inner", split="x")
    seen = check_against_merge(batches, urls, reference, ["z", "t2m"])
    assert sorted(seen) == list(reference.time.values) == list(days[30:41])


def test_an_exact_merge_takes_equal_selections_and_refuses_others(tmp_path: Path) -> None:
    urls = era5_join(tmp_path, pressure=(0, 60), surface_steps=(0, 60))
    days = dates(0, 60)
    chosen = slice(days[12], days[47])
    pl = opened(urls[0]).sel(time=chosen)[["t"]]
    sfc = opened(urls[1]).sel(time=chosen)[["msl"]]
    reference = xr.merge([pl, sfc], join="exact")
    seen = check_against_merge(epoch([pl, sfc], split="train"), urls, reference, ["t", "msl"])
    assert sorted(seen) == list(days[12:48])
    whole = opened(urls[1])[["msl"]]
    with pytest.raises(ValueError):
        xr.merge([pl, whole], join="exact")
    with pytest.raises(ValueError, match=r"time coordinates of Dataset 0 .* and Dataset 1"):
        epoch([pl, whole], split="train")


def test_what_a_list_of_datasets_cannot_be_read_as_is_refused(tmp_path: Path) -> None:
    urls = era5_join(tmp_path, pressure=(0, 60), surface_steps=(0, 60))
    days = dates(0, 60)
    pl, sfc = opened(urls[0]), opened(urls[1])
    undecoded = xr.open_zarr(urls[1], mask_and_scale=False)
    cases: list[tuple[list[Any], dict[str, Any], str]] = [
        ([pl[["t"]], urls[1]], {}, r"either xarray Datasets or stores"),
        ([pl.isel(time=slice(0, 40, 2))[["t"]], sfc[["msl"]]], {}, r"one step in every 2"),
        (
            [pl.isel(latitude=slice(0, 3))[["t"]], sfc.isel(latitude=slice(1, 4))[["msl"]]],
            {"join": "inner"},
            r"crop the grid differently",
        ),
        ([pl.isel(latitude=slice(0, 3))[["t"]], sfc[["msl"]]], {}, r"crop the grid differently"),
        ([pl[["t"]], undecoded[["msl"]]], {}, r"decoded values and some stored ones"),
        (
            [pl.sel(time=slice(days[0], days[9]))[["t"]], sfc.sel(time=slice(days[20], None))],
            {"join": "inner"},
            r"share no date",
        ),
        ([pl[["t"]], sfc[["msl"]]], {"variables": ["t"]}, r"variables=\['t'\] and the Dataset"),
    ]
    for datasets, settings, message in cases:
        with pytest.raises(ValueError, match=message):
            epoch(datasets, **{"split": "train", **settings})


def test_a_crop_on_every_dataset_is_the_loaders_region(tmp_path: Path) -> None:
    urls = era5_join(tmp_path, pressure=(0, 30), surface_steps=(0, 30))
    crop = {"latitude": slice(1, 4), "longitude": slice(2, 6)}
    pl = opened(urls[0]).isel(crop)[["z"]]
    sfc = opened(urls[1]).isel(crop)[["t2m"]]
    reference = xr.merge([pl, sfc], join="exact")
    seen = check_against_merge(epoch([pl, sfc], split="all"), urls, reference, ["z", "t2m"])
    assert len(seen) == 30


def test_a_selection_reaching_past_another_stores_dates_keeps_the_shared_ones(
    tmp_path: Path,
) -> None:
    """The pressure Dataset selects its first 31 steps, the surface store starts at its
    step 10: the merge holds steps 10 to 30, and so does the loader."""
    urls = era5_join(tmp_path, pressure=(0, 72), surface_steps=(10, 57))
    days = dates(0, 72)
    pl = opened(urls[0]).sel(time=slice(days[0], days[30]))[["t"]]
    sfc = opened(urls[1])[["t2m"]]
    reference = xr.merge([pl, sfc], join="inner")
    seen = check_against_merge(epoch([pl, sfc], join="inner", split="t"), urls, reference, ["t"])
    assert sorted(seen) == list(reference.time.values) == list(days[10:31])


@pytest.mark.parametrize("join", ["exact", "inner"])
def test_datasets_that_name_time_differently_join_on_their_dates(tmp_path: Path, join: str) -> None:
    """A CDS-style Dataset (`valid_time`) beside a WeatherBench2-style one (`time`), each
    as `xr.open_zarr` opens it: the loader holds what their merge holds once the user has
    renamed one, under either join."""
    days = dates(0, 40)
    pl_url = write(pressure_levels(days), tmp_path / "pl.zarr", 24, 3)
    sfc_url = write(cds_named(surface(days)), tmp_path / "sfc.zarr", 1, 3)
    pl = opened(pl_url)[["t"]]
    chosen = slice(days[5], days[30]) if join == "inner" else slice(None)
    sfc = opened(sfc_url).sel(valid_time=chosen)[["t2m"]]
    reference = xr.merge([pl, as_time(sfc)], join=join)
    batches = epoch([pl, sfc], join=join, split="train" if join == "inner" else "all")
    seen = check_against_merge(batches, [pl_url, sfc_url], reference, ["t", "t2m"])
    assert sorted(seen) == list(reference.time.values)


def one_store(folder: Path, steps: int = 30) -> str:
    """A WeatherBench2-style store: pressure-level and surface variables side by side."""
    days = dates(0, steps)
    both = xr.merge([pressure_levels(days), surface(days)])
    return write(both, folder / "era5.zarr", 24, 3)


def test_two_datasets_of_one_store_read_it_as_that_one_store(tmp_path: Path) -> None:
    """Each Dataset's selection applies to its own variables, and the store is read as
    one source would read it: the same batches and the same state as the store's URL
    with the same selection."""
    url = one_store(tmp_path)
    ds = opened(url)
    upper, lower = ds[["t"]].sel(level=[500, 850]), ds[["t2m"]]
    reference = xr.merge([upper, lower], join="exact")
    settings: dict[str, Any] = {"split": "all", "batch_size": 6, "seed": 4, "device": "cpu"}
    listed = build_loader([upper, lower], **settings)
    batches = list(listed)
    seen = check_against_merge(batches, [url], reference, ["t", "t2m"])
    assert sorted(seen) == list(reference.time.values)
    alone = build_loader(url, ["t", "t2m"], levels={"t": [500, 850]}, **settings)
    assert [batch_key(b) for b in alone] == [batch_key(b) for b in batches]
    assert alone.state_dict() == listed.state_dict()
    # each chunk once: 30 steps in 24-step chunks, two chunks of each variable
    assert listed.stats()["chunks_read"] == alone.stats()["chunks_read"] == 4


def test_datasets_of_one_store_whose_levels_differ_merge_as_xarray_merges(
    tmp_path: Path,
) -> None:
    """`ds[["t"]]` keeps every level and `ds[["z"]]` selects 500 hPa: the inner merge
    aligns both on 500 hPa, and so does the loader; the exact merge refuses, and so does
    the loader, naming the levels."""
    url = one_store(tmp_path)
    ds = opened(url)
    whole, picked = ds[["t", "msl"]], ds[["z"]].sel(level=[500])
    reference = xr.merge([whole, picked], join="inner")
    assert list(reference.level.values) == [500]
    batches = epoch([whole, picked], join="inner", split="all")
    check_against_merge(batches, [url], reference, ["t", "z", "msl"])
    with pytest.raises(ValueError):
        xr.merge([whole, picked], join="exact")
    with pytest.raises(ValueError, match=r"'level' coordinates of the joined Datasets differ"):
        epoch([whole, picked], split="all")


@pytest.mark.parametrize(
    ("first", "second"),
    [([500, 850], [850, 1000]), ([850, 500], [500, 850, 1000]), ([1000, 850, 500], [500, 850])],
)
def test_level_selections_that_differ_merge_inner_as_xarray_merges(
    tmp_path: Path, first: list[int], second: list[int]
) -> None:
    """Two stores' Datasets selecting overlapping levels: the inner merge keeps the levels
    both hold, in the first Dataset's order, for both variables; the exact one refuses
    naming the first values that differ."""
    days = dates(0, 30)
    urls = [
        write(pressure_levels(days)[["t"]], tmp_path / "t.zarr", 24, 3),
        write(pressure_levels(days, seed=7)[["z"]], tmp_path / "z.zarr", 1, 3),
    ]
    t = opened(urls[0]).sel(level=first)[["t"]]
    z = opened(urls[1]).sel(level=second)[["z"]]
    reference = xr.merge([t, z], join="inner")
    batches = epoch([t, z], join="inner", split="all")
    check_against_merge(batches, urls, reference, ["t", "z"])
    assert {as_numpy(b["t"]).shape[1] for b in batches} == {reference.sizes["level"]}
    with pytest.raises(ValueError):
        xr.merge([t, z], join="exact")
    message = rf"first at position 0 \({first[0]} and {second[0]}\); join='exact'"
    with pytest.raises(ValueError, match=message):
        epoch([t, z], split="all")


def test_what_datasets_of_one_store_or_of_other_levels_cannot_be_is_refused(
    tmp_path: Path,
) -> None:
    url = one_store(tmp_path)
    ds = opened(url)
    with pytest.raises(ValueError, match=r"'t' is a data variable of Dataset 0 and of Dataset 1"):
        epoch([ds[["t"]], ds[["t", "z"]]], split="all")
    with pytest.raises(ValueError, match=r"Datasets hold no 'level' value in common"):
        epoch([ds[["t"]].sel(level=[500]), ds[["z"]].sel(level=[1000])], join="inner")
    with pytest.raises(ValueError, match=r"Dataset 1 of source is opened from .*era5.zarr, as"):
        epoch([ds[["t"]], ds[["t2m"]]], split="all", storage_options=[{}, {"mkdir": False}])
