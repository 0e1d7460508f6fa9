"""Date splits on real stores: written by xarray (`to_zarr`, Zarr v2 and v3, CF-encoded
time) and by zarr-python (datetime64 stored natively). The loader's split is exactly the
steps `xr.open_zarr(...).sel(time=slice(first, last))` selects, windows never cross a
boundary that cuts through a chunk, and bad dates, a missing or unsorted time coordinate,
a calendar CF does not define and a manifest cut on other dates are refused by name
(calendars numpy cannot hold are split in tests/io/test_calendars.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import insitubatch_nodes as ib
from insitubatch_nodes.builder.split_anchors import split_anchors
from tests.helpers.batches import as_numpy
from tests.helpers.stores import write_store
from tests.helpers.time_stores import hourly, write_native, write_xarray

TIMES = hourly("2014-12-30T00", 140, hours=6)  # 2014-12-30 .. 2015-02-02T18, 6-hourly
# boundaries at 2015-01-01T12 (step 10) and 2015-01-03T00 (step 20): inside chunks of 4 steps
SPLITS = {
    "train": ("2014", "2015-01-01T11"),
    "val": ("2015-01-01T12", "2015-01-02"),
    "test": ("2015-01-03", "2016"),
}


# xarray's notes on v3 and consolidated metadata
pytestmark = pytest.mark.filterwarnings("ignore")


WRITERS: dict[str, Callable[[Path], str]] = {
    "xarray-v2": lambda p: write_xarray(p, TIMES, zarr_format=2),
    "xarray-v3": lambda p: write_xarray(p, TIMES, zarr_format=3),
    "native-v3": lambda p: write_native(p, TIMES, zarr_format=3),
    "native-v2": lambda p: write_native(p, TIMES, zarr_format=2),
}


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("date-stores")
    return {kind: write(root / f"{kind}.zarr") for kind, write in WRITERS.items()}


def _sel(url: str, first: str, last: str) -> list[int]:
    """The brute force: the steps xarray selects for the same dates."""
    ds = xr.open_zarr(url, consolidated=False)
    steps = xr.DataArray(np.arange(ds.sizes["time"]), coords={"time": ds.time.values}, dims="time")
    return steps.sel(time=slice(first, last)).values.tolist()


def _ordered(url: str, split: str, **settings: Any) -> tuple[list[int], np.ndarray]:
    loader = ib.build_loader(
        url,
        ["t2m"],
        split,
        splits=SPLITS,
        batch_size=5,
        evaluation=True,
        device="cpu",
        **settings,
    )
    batches = list(loader)
    return (
        [i for b in batches for i in b["sample_index"].tolist()],
        np.concatenate([as_numpy(b["t2m"]) for b in batches]),
    )


@pytest.mark.parametrize("kind", list(WRITERS))
def test_each_split_is_what_xarray_selects_for_its_dates(stores: dict[str, str], kind: str) -> None:
    url = stores[kind]
    ds = xr.open_zarr(url, consolidated=False)
    for split, dates in SPLITS.items():
        first, last = (dates, dates) if isinstance(dates, str) else dates
        steps, values = _ordered(url, split)
        assert steps == _sel(url, first, last)
        np.testing.assert_array_equal(values, ds.t2m.sel(time=slice(first, last)).values)


@pytest.mark.parametrize("kind", list(WRITERS))
def test_the_time_axis_decodes_to_xarrays_dates(stores: dict[str, str], kind: str) -> None:
    axis = ib.ZarrSource.open(stores[kind], ["t2m", "z"]).time_axis()
    assert axis.name == "time"
    expected = xr.open_zarr(stores[kind], consolidated=False).time.values
    np.testing.assert_array_equal(axis.dates.astype("M8[ns]"), expected)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data())
def test_random_date_ranges_hold_the_steps_xarray_selects(
    stores: dict[str, str], data: st.DataObject
) -> None:
    url = stores[data.draw(st.sampled_from(["xarray-v2", "xarray-v3"]))]
    hours = st.integers(-30, TIMES.size * 6 + 30)
    unit = st.sampled_from(["D", "h", "m"])
    a, b = sorted(data.draw(st.lists(hours, min_size=2, max_size=2)))
    first = str((TIMES[0] + np.timedelta64(a, "h")).astype(f"M8[{data.draw(unit)}]"))
    last = str((TIMES[0] + np.timedelta64(b, "h")).astype(f"M8[{data.draw(unit)}]"))
    expected = _sel(url, first, last)
    if not expected:
        with pytest.raises(ValueError, match="holds no step"):
            ib.ZarrSource.open(url, ["t2m"], splits={"x": (first, last)})
        return
    source = ib.ZarrSource.open(url, ["t2m"], splits={"x": (first, last)})
    anchors = split_anchors(source, "x", None)
    assert anchors.unit_samples(anchors.units).tolist() == expected


def test_windows_and_leads_never_cross_a_boundary_inside_a_chunk(stores: dict[str, str]) -> None:
    """Boundaries at 2015-01-01T12 and 2015-01-03T00 cut through chunks of 4 steps (a day):
    such a chunk is read by both splits, but each split's anchors, windows and leads stay
    in its own steps (a value of t2m is its step times 1000, plus noise below 1)."""
    url = stores["xarray-v3"]
    spec = ib.SampleSpec({"x": ib.window(["t2m"], steps=2), "y": ib.leads(["t2m"], [1, 2])})
    for split, dates in SPLITS.items():
        first, last = (dates, dates) if isinstance(dates, str) else dates
        own = set(_sel(url, first, last))
        loader = ib.build_loader(
            url, split=split, splits=SPLITS, spec=spec, batch_size=4, device="cpu", seed=1
        )
        seen = set()
        for batch in loader:
            for key in ("x/t2m", "y/t2m"):
                steps = np.floor(as_numpy(batch[key])[..., 0, 0] / 1000).astype(int)
                assert set(steps.reshape(-1).tolist()) <= own
            seen.update(batch["sample_index"].tolist())
        assert seen == {t for t in own if t - 1 in own and t + 2 in own}
    # the chunk holding 2015-01-01T12 (step 10, chunk 2 of steps 8..11) is in two splits
    manifest = ib.ZarrSource.open(url, splits=SPLITS).manifest
    assert 2 in manifest.units("train") and 2 in manifest.units("val")


def test_a_manifest_from_dates_round_trips_and_is_refused_on_other_dates(
    stores: dict[str, str], tmp_path: Path
) -> None:
    url = stores["native-v3"]
    manifest = ib.ZarrSource.open(url, ["t2m"], splits=SPLITS).manifest
    path = tmp_path / "splits.json"
    path.write_text(manifest.dumps())
    loader = ib.build_loader(url, ["t2m"], "val", manifest=path, batch_size=4, device="cpu")
    assert sorted(i for b in loader for i in b["sample_index"].tolist()) == _sel(
        url, "2015-01-01T12", "2015-01-02"
    )
    shifted = write_native(tmp_path / "shifted.zarr", TIMES + np.timedelta64(1, "h"))
    with pytest.raises(
        ValueError,
        match=r"the manifest does not match this store: the manifest's dates were cut on time "
        r"coordinate 'time' \(140 steps, 2014-12-30T00:00 \.\. 2015-02-02T18:00\), but this "
        r"store's 'time' holds other dates \(140 steps, 2014-12-30T01:00 \.\. "
        r"2015-02-02T19:00\)\. Cut a new manifest for this store",
    ):
        ib.build_loader(shifted, ["t2m"], "val", manifest=path)
    with pytest.raises(ValueError, match="give either manifest= or splits=, not both"):
        ib.build_loader(url, ["t2m"], manifest=path, splits=SPLITS)


def test_a_state_is_refused_when_a_boundary_moves_inside_a_unit(stores: dict[str, str]) -> None:
    url = stores["native-v3"]
    loader = ib.build_loader(url, ["t2m"], splits=SPLITS, batch_size=4, device="cpu")
    iterator = iter(loader)
    next(iterator)
    state = loader.state_dict()
    moved = {**SPLITS, "train": ("2014", "2015-01-01T05")}  # same units, fewer steps
    other = ib.build_loader(url, ["t2m"], splits=moved, batch_size=4, device="cpu")
    with pytest.raises(
        ValueError, match=r"split 'train' had 10 anchors when the state was saved, now 9"
    ):
        other.load_state_dict(state)
        next(iter(other))


def _write_with_time(path: Path, time: np.ndarray, attrs: dict[str, Any]) -> str:
    group = zarr.open_group(str(path), mode="w")
    group.create_array(
        "t2m", shape=(time.size, 2), chunks=(2, 2), dtype="f4", dimension_names=("time", "x")
    )[...] = 1.0
    array = group.create_array("time", data=time, dimension_names=("time",))
    array.attrs.update(attrs)
    return str(path)


def test_what_cannot_be_split_by_dates_is_refused_with_what_to_do(tmp_path: Path) -> None:
    hours = np.arange(8, dtype=np.int64)
    unsorted = _write_with_time(
        tmp_path / "unsorted.zarr",
        hours[[0, 1, 3, 2, 4, 5, 6, 7]],
        {"units": "hours since 2000-01-01"},
    )
    with pytest.raises(ValueError, match=r"'time' is not increasing: step 3 \(2000-01-01T02:00\)"):
        ib.build_loader(unsorted, splits={"train": "2000"})
    no_units = _write_with_time(tmp_path / "no-units.zarr", hours, {})
    with pytest.raises(ValueError, match=r"holds int64 values without CF units"):
        ib.build_loader(no_units, splits={"train": "2000"})
    calendar = _write_with_time(
        tmp_path / "unknown.zarr", hours, {"units": "days since 2000-01-01", "calendar": "mars"}
    )
    with pytest.raises(ValueError, match=r"calendar 'mars', which CF does not define"):
        ib.build_loader(calendar, splits={"train": "2000"})
    offset = _write_with_time(
        tmp_path / "offset.zarr", hours, {"units": "hours since 2000-01-01T00:00:00+01:00"}
    )
    axis = ib.ZarrSource.open(offset).time_axis()  # xarray's decoder takes the offset
    assert axis.dates[0] == np.datetime64("1999-12-31T23:00")
    url, _ = write_store(tmp_path / "no-time.zarr")
    with pytest.raises(ValueError, match=r"has no time coordinate for \['t2m', 'u10'\]: dates"):
        ib.build_loader(url, splits={"train": "2000"})
    good = _write_with_time(tmp_path / "good.zarr", hours, {"units": "hours since 2000-01-01"})
    with pytest.raises(ValueError, match=r"split 'train''s last date is '2000-02-30'"):
        ib.build_loader(good, splits={"train": ("2000", "2000-02-30")})
    with pytest.raises(ValueError, match=r"split 'val' \(2001\) holds no step"):
        ib.build_loader(good, splits={"train": "2000", "val": "2001"})
