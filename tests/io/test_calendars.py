"""Date splits and time selections on every CF calendar, against xarray: a store written
by `to_zarr` from cftime dates (`noleap`, `360_day`, `all_leap`, `julian`,
`proleptic_gregorian`, `standard`; Zarr v2 and v3) is split into exactly the steps
`xr.open_zarr(path, use_cftime=True).sel(time=slice(first, last))` selects, with the same
inclusive whole periods ("2015" is all of 2015 in that calendar); `frequency` and
`max_gap` count that calendar's days; without cftime such a calendar is refused naming
the extra that brings it. (A value of t2m is its step's index.)"""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import insitubatch_nodes as ib
from insitubatch_nodes.cli.split_command import split_text
from tests.helpers.batches import as_numpy
from tests.helpers.time_stores import calendar_times, write_calendar

CALENDARS = ("noleap", "360_day", "all_leap", "julian", "proleptic_gregorian", "standard")
# across both Februaries (2016 is leap in all but noleap and 360_day) and a year's end
SPLITS = {"a": ("2014", "2015-02"), "b": ("2015-03", "2015"), "c": "2016"}


# xarray's notes on v3, consolidated metadata, cftime
pytestmark = pytest.mark.filterwarnings("ignore")


def _xarray_steps(url: str, first: str, last: str) -> list[int]:
    """The reference: the steps xarray selects for the same dates, in the same calendar."""
    ds = xr.open_zarr(url, consolidated=False, use_cftime=True)
    steps = xr.DataArray(np.arange(ds.sizes["time"]), coords={"time": ds.time.values}, dims="time")
    return steps.sel(time=slice(first, last)).values.tolist()


def _split_steps(url: str, split: str, splits: dict[str, Any], **settings: Any) -> list[int]:
    loader = ib.build_loader(
        url,
        ["t2m"],
        split,
        splits=splits,
        batch_size=64,
        evaluation=True,
        device="cpu",
        **settings,
    )
    batches = list(loader)
    steps = [i for b in batches for i in b["sample_index"].tolist()]
    values = np.concatenate([as_numpy(b["t2m"])[:, 0, 0] for b in batches])
    assert values.tolist() == steps  # the values read are those of the steps named
    return steps


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("calendar", CALENDARS)
def test_each_split_is_what_xarray_selects_in_the_stores_calendar(
    tmp_path: Path, calendar: str, zarr_format: int
) -> None:
    times = calendar_times(calendar, "2014-12-20", 900)  # 12-hourly, into March 2016
    url = write_calendar(tmp_path / "c.zarr", times, zarr_format=zarr_format)
    assert xr.open_zarr(url, consolidated=False).time.attrs == {}  # decoded by xarray
    for split, dates in SPLITS.items():
        first, last = (dates, dates) if isinstance(dates, str) else dates
        expected = _xarray_steps(url, first, last)
        assert expected  # every split holds steps
        assert _split_steps(url, split, SPLITS) == expected


def test_standard_dates_before_1582_are_julian_as_xarray_reads_them(tmp_path: Path) -> None:
    """October 1582 of the standard calendar skips ten days (the 4th is followed by the
    15th); its leap years before then are Julian (1500 has a 29th of February)."""
    times = calendar_times("standard", "1500-02-20", 2000, hours=6)  # into 1501
    url = write_calendar(tmp_path / "s.zarr", times, zarr_format=3)
    splits = {"feb": ("1500-02-29", "1500-02-29"), "rest": ("1500-03", "1501")}
    for split, (first, last) in splits.items():
        assert _split_steps(url, split, splits) == _xarray_steps(url, first, last)
    crossing = calendar_times("standard", "1582-09-25", 120)
    url = write_calendar(tmp_path / "g.zarr", crossing, zarr_format=2)
    october = {"oct": ("1582-10", "1582-10")}
    steps = _split_steps(url, "oct", october)
    assert steps == _xarray_steps(url, "1582-10", "1582-10")
    assert len(steps) == 2 * 21  # 31 names of days, 10 of them skipped, 12-hourly


def test_a_day_only_some_calendars_have_is_read_in_the_stores_own(tmp_path: Path) -> None:
    url = write_calendar(
        tmp_path / "360.zarr", calendar_times("360_day", "2015-02-25", 40), zarr_format=3
    )
    day = {"x": "2015-02-30"}
    assert _split_steps(url, "x", day) == _xarray_steps(url, "2015-02-30", "2015-02-30")
    url = write_calendar(
        tmp_path / "365.zarr", calendar_times("noleap", "2015-02-25", 40), zarr_format=3
    )
    with pytest.raises(ValueError, match=r"not a date of the 'noleap' calendar.*2015-02 has 28"):
        ib.build_loader(url, ["t2m"], "x", splits={"x": "2015-02-29"})
    # the 1st of March follows the 28th of February at once
    steps = _split_steps(url, "x", {"x": ("2015-02-28T12", "2015-03-01")})
    assert steps == _xarray_steps(url, "2015-02-28T12", "2015-03-01")
    assert len(steps) == 3


def test_the_split_command_writes_the_dates_of_the_stores_calendar(tmp_path: Path) -> None:
    url = write_calendar(
        tmp_path / "360.zarr", calendar_times("360_day", "2015-02-25", 40), zarr_format=3
    )
    manifest = ib.ZarrSource.open(url, ["t2m"], splits={"x": ("2015-02-30", "2015-03")}).manifest
    assert manifest.dates is not None
    assert list(manifest.dates["x"]) == ["2015-02-30T00:00", "2015-03-14T12:00"]
    assert manifest.time is not None and manifest.time["calendar"] == "360_day"
    text = split_text(manifest)
    assert "time coordinate 'time' (360_day calendar): 2015-02-25T00:00 .. 2015-03-14T12:00" in text
    assert "2015-02-30T00:00" in text


def _anchors(url: str, **settings: Any) -> list[int]:
    spec = ib.SampleSpec({"x": ib.window(["t2m"], steps=2), "y": ib.leads(["t2m"], [1])})
    loader = ib.build_loader(
        url, spec=spec, split="all", batch_size=16, evaluation=True, device="cpu", **settings
    )
    return sorted(i for b in loader for i in b["sample_index"].tolist())


def test_frequency_and_max_gap_count_the_calendars_days(tmp_path: Path) -> None:
    """6-hourly noleap dates across the end of February, 2016-03-01T12 and T18 missing."""
    dense = calendar_times("noleap", "2016-02-26", 24, hours=6)  # 2016: leap elsewhere
    times = np.concatenate([dense[:14], dense[16:]])
    url = write_calendar(tmp_path / "gap.zarr", times, zarr_format=3, steps_per_chunk=4)
    ds = xr.open_zarr(url, consolidated=False, use_cftime=True)
    hours = np.array([(t - ds.time.values[0]).total_seconds() / 3600 for t in ds.time.values])
    daily = _anchors(url, frequency="24h")
    # anchors at whole days from the first date, with t-1 day and t+1 day inside the store
    on_days = [t for t in range(times.size) if hours[t] % 24 == 0]
    expected = [t for t in on_days if hours[t] - 24 in hours and hours[t] + 24 in hours]
    assert daily == expected and len(daily) == 4  # 02-27, 02-28, 03-01, 03-02: no 29th
    strict = _anchors(url, max_gap="6h")
    gaps = np.diff(hours)
    assert strict == [t for t in range(1, times.size - 1) if gaps[t - 1] <= 6 and gaps[t] <= 6]
    assert 13 not in strict and 14 not in strict


def test_without_cftime_a_calendar_is_refused_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = write_calendar(
        tmp_path / "365.zarr", calendar_times("noleap", "2015-02-25", 40), zarr_format=3
    )
    real_import = builtins.__import__

    def no_cftime(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "cftime" or name.startswith("cftime."):
            raise ImportError("No module named 'cftime'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_cftime)
    with pytest.raises(
        ValueError,
        match=r"'noleap' calendar.*cftime.*not installed.*insitubatch-nodes\[calendars\]",
    ):
        ib.build_loader(url, ["t2m"], "x", splits={"x": "2015"})


@pytest.mark.parametrize("calendar", ["noleap", "360_day", "standard"])
def test_a_dataset_selected_by_date_in_its_calendar_is_that_split(
    tmp_path: Path, calendar: str
) -> None:
    times = calendar_times(calendar, "2014-12-20", 900)
    url = write_calendar(tmp_path / "c.zarr", times, zarr_format=3)
    ds = xr.open_zarr(url, consolidated=False, use_cftime=True)
    for first, last in (("2015-02", "2015-03"), ("2015-02-28T12", "2016")):
        selected = ds.sel(time=slice(first, last))
        loader = ib.build_loader(selected, split="x", batch_size=64, evaluation=True, device="cpu")
        steps = [i for b in loader for i in b["sample_index"].tolist()]
        assert steps == _xarray_steps(url, first, last)
    every_other = ds.isel(time=slice(0, None, 2))
    loader = ib.build_loader(every_other, split="x", batch_size=64, evaluation=True, device="cpu")
    assert sorted(i for b in loader for i in b["sample_index"].tolist()) == list(range(0, 900, 2))


def test_a_manifest_keeps_its_calendar_and_is_refused_on_anothers(tmp_path: Path) -> None:
    """January 1970 has the same day counts in noleap and proleptic_gregorian: only the
    calendar the manifest records tells the two stores apart."""
    noleap = write_calendar(
        tmp_path / "n.zarr", calendar_times("noleap", "1970-01-01", 40), zarr_format=3
    )
    text = ib.ZarrSource.open(noleap, ["t2m"], splits={"x": "1970-01-05"}).manifest.dumps()
    again = ib.ZarrSource.open(noleap, ["t2m"], manifest=text)
    assert again.manifest.step_ranges("x").tolist() == [[8, 10]]
    gregorian = write_calendar(
        tmp_path / "g.zarr", calendar_times("proleptic_gregorian", "1970-01-01", 40), zarr_format=3
    )
    with pytest.raises(ValueError, match=r"in the 'noleap' calendar, not 'proleptic_gregorian'"):
        ib.ZarrSource.open(gregorian, ["t2m"], manifest=text)


def test_frequency_6h_on_an_hourly_noleap_store_is_a_stride_of_6(tmp_path: Path) -> None:
    times = calendar_times("noleap", "2016-02-28", 72, hours=1)  # over the missing 29th
    url = write_calendar(tmp_path / "h.zarr", times, zarr_format=2, steps_per_chunk=6)
    assert _anchors(url, frequency="6h") == _anchors(url, stride=6) == list(range(6, 66, 6))
