"""An xarray Dataset as the source: `build_loader(xr.open_zarr(url).sel(...)[[...]])`
reads the store in place and yields exactly the batches of the equivalent keyword
arguments (`splits=`, `stride=`, `levels=`, `variables=`); what stored chunks cannot give
is refused with what to do; and the loader imports no xarray when given none."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import insitubatch_nodes as ib
from tests.helpers.batches import as_numpy, batch_key
from tests.helpers.cf_stores import write_attributes
from tests.helpers.time_stores import LEVELS, hourly, write_xarray

TIMES = hourly("2016-01-01T00", 96, hours=6)  # 2016-01-01 .. 2016-01-24T18


# xarray's and zarr's notes on v2, v3 and consolidated metadata
pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    root = tmp_path_factory.mktemp("datasets")
    return {f: write_xarray(root / f"v{f}.zarr", TIMES, zarr_format=f) for f in (2, 3)}


@pytest.fixture(scope="module")
def descending(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    """The stores with their levels kept 1000 ... 50 (the CDS ERA5 layout)."""
    root = tmp_path_factory.mktemp("descending")
    return {
        f: write_xarray(root / f"d{f}.zarr", TIMES, zarr_format=f, descending=True) for f in (2, 3)
    }


def _keys(source: Any, **settings: Any) -> list[Any]:
    loader = ib.build_loader(source, batch_size=5, device="cpu", seed=4, **settings)
    return [batch_key(b) for b in loader]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_selected_dataset_yields_the_batches_of_the_keyword_arguments(
    stores: dict[int, str], zarr_format: int
) -> None:
    url = stores[zarr_format]
    ds = xr.open_zarr(url, consolidated=False)
    selected = ds.sel(time=slice("2016-01-03", "2016-01-12T05"), level=[250, 850])[["z", "t2m"]]
    same = _keys(
        url,
        variables=["z", "t2m"],
        split="train",
        splits={"train": ("2016-01-03", "2016-01-12T05")},
        levels=[250, 850],
    )
    assert _keys(selected, split="train") == same
    whole = _keys(ds[["t2m"]], split="val")  # no selection: the default split of the store
    assert whole == _keys(url, variables=["t2m"], split="val")


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_levels_come_in_the_datasets_order_whatever_the_stores(
    descending: dict[int, str], zarr_format: int
) -> None:
    """`.sel(level=[500, 850])` on a store keeping levels descending holds 500 then 850:
    the loader yields them so, as `levels=[500, 850]` does by URL; any other order, a
    level twice, and the whole axis reversed likewise."""
    url = descending[zarr_format]
    ds = xr.open_zarr(url, consolidated=False)
    for levels in ([500, 850], [850, 50, 500], [500, 1000, 500]):
        selected = ds.sel(level=levels)[["z"]]
        steps, got = _in_order(selected)
        np.testing.assert_array_equal(got["z"], selected.z.values[steps])
        assert _keys(selected, split="all") == _keys(
            url, variables=["z"], split="all", levels=levels
        )
    reversed_ = ds.isel(level=slice(None, None, -1))[["z"]]
    steps, got = _in_order(reversed_)
    np.testing.assert_array_equal(got["z"], reversed_.z.values[steps])
    assert [int(v) for v in reversed_.level.values] == list(LEVELS)


def _in_order(selected: Any) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Every step of a Dataset with no time selection, in order, by variable."""
    loader = ib.build_loader(selected, split="all", batch_size=7, evaluation=True, device="cpu")
    batches = list(loader)
    steps = np.concatenate([b["sample_index"].numpy() for b in batches])
    names = [k for k in batches[0] if k != "sample_index"]
    return steps, {k: np.concatenate([as_numpy(b[k]) for b in batches]) for k in names}


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.integers(0, TIMES.size - 1),
    st.integers(0, TIMES.size - 1),
    st.lists(st.sampled_from(LEVELS), min_size=1, max_size=5),
    st.booleans(),
    st.sampled_from([["z"], ["t2m", "z"], ["z", "t2m"]]),
    st.tuples(st.integers(0, 2), st.integers(1, 3)),
    st.tuples(st.integers(0, 3), st.integers(1, 4)),
)
def test_any_selection_holds_what_xarray_holds(
    stores: dict[int, str],
    descending: dict[int, str],
    a: int,
    b: int,
    levels: list[int],
    stored_descending: bool,
    names: list[str],
    lat: tuple[int, int],
    lon: tuple[int, int],
) -> None:
    """Any run of steps, levels in any order (some twice) on a store keeping them either
    way, any variables and any crop: what the selected Dataset holds."""
    a, b = min(a, b), max(a, b)
    ds = xr.open_zarr((descending if stored_descending else stores)[3], consolidated=False)
    crop = {"lat": slice(lat[0], lat[0] + lat[1]), "lon": slice(lon[0], lon[0] + lon[1])}
    selected = ds.isel(time=slice(a, b + 1), **crop).sel(level=levels)[names]
    whole = b - a + 1 == TIMES.size  # no time selection: every step is split "all"
    loader = ib.build_loader(
        selected, split="all" if whole else "x", batch_size=7, evaluation=True, device="cpu"
    )
    batches = list(loader)
    steps = np.concatenate([b["sample_index"].numpy() for b in batches]) - a
    assert steps.tolist() == list(range(b - a + 1))
    for name in names:
        got = np.concatenate([as_numpy(batch[name]) for batch in batches])
        np.testing.assert_array_equal(got, selected[name].values)


def test_every_kth_step_is_a_stride(stores: dict[int, str]) -> None:
    url = stores[3]
    spec = ib.SampleSpec({"x": ib.window(["t2m"], steps=2), "y": ib.leads(["t2m"], [1])})
    ds = xr.open_zarr(url, consolidated=False)
    strided = ds.isel(time=slice(8, 80, 4))[["t2m"]]
    expected = _keys(
        url,
        variables=["t2m"],
        split="train",
        splits={"train": (str(TIMES[8]), str(TIMES[76]))},
        stride=4,
        spec=spec,
    )
    assert _keys(strided, split="train", spec=spec) == expected


def test_what_stored_chunks_cannot_give_is_refused(stores: dict[int, str], tmp_path: Path) -> None:
    url = stores[3]
    ds = xr.open_zarr(url, consolidated=False)
    computed = ds.copy()
    computed["t2m"] = ds.t2m * 2
    cases: list[tuple[Any, str]] = [
        (xr.Dataset({"a": (("time", "x"), np.zeros((4, 2)))}), "does not say which Zarr store"),
        (computed[["t2m"]], r"'t2m' is not read from the store as it is"),
        (ds[["t2m"]].astype("float64"), r"does not say which Zarr store .* astype"),
        (ds.rename(t2m="temp")[["temp"]], r"'temp' is not an array of .* \(renamed\?\)"),
        (ds[["t2m"]].transpose("time", "lon", "lat"), r"has dimensions \('time', 'lon', 'lat'\)"),
        (ds[["t2m"]].isel(lon=[0, 2]), r"2 of 4 positions of 't2m' along 'lon' .* not one run"),
        (ds[["t2m"]].isel(lat=slice(None, None, -1)), r"along 'lat' that are not one run"),
        (ds[["z"]].sel(level=500), r"selects one value of 'level'.* ds.sel\(level=\[\.\.\.\]\)"),
        (ds[["t2m"]].isel(lat=0), r"selects one value of 'lat'"),
        (ds[["t2m"]].isel(time=[0, 1, 5]), "is not a run of steps"),
        (ds[["t2m"]].isel(time=slice(1, 40, 4)), "start at a multiple of 4"),
        (ds[["t2m"]].isel(time=slice(0, 8)).assign_coords(time=TIMES[:8] + 1), "not the store's"),
        (ds[[]], "has no data variables"),
    ]
    for selected, message in cases:
        with pytest.raises(ValueError, match=message):
            ib.build_loader(selected)
    timed = ds[["t2m"]].isel(time=slice(0, 40))
    with pytest.raises(ValueError, match="select time in one place"):
        ib.build_loader(timed, splits={"train": "2016"})
    with pytest.raises(ValueError, match="crop in one place"):
        ib.build_loader(ds[["t2m"]].isel(lat=slice(1, 3)), patches=ib.PatchSpec((1, 1)))
    with pytest.raises(ValueError, match="select levels in one place"):
        ib.build_loader(ds[["z"]].sel(level=[500]), levels=[500])
    with pytest.raises(ValueError, match=r"variables=\['z'\] and the Dataset's data variables"):
        ib.build_loader(ds[["t2m"]], ["z"])
    packed = write_attributes(
        tmp_path / "packed.zarr",
        np.ones((8, 3), "int16"),
        {"scale_factor": 0.5, "add_offset": 10.0},
        zarr_format=3,
        name="t2m",
    )
    # decoded Datasets (packing, fill values) are read as xarray shows them (issue 32)
    decoded = xr.open_zarr(packed, consolidated=False)
    (batch,) = list(ib.build_loader(decoded, split="all", batch_size=8, device="cpu"))
    np.testing.assert_array_equal(as_numpy(batch["t2m"]), decoded.t2m.values)
    with pytest.raises(ValueError, match=r"decode_cf=False and the Dataset shows decoded"):
        ib.build_loader(decoded, decode_cf=False)
    filled = tmp_path / "filled.zarr"  # a float fill value xarray shows as NaN
    xr.Dataset(
        {"t2m": (("time", "x"), np.array([[1.0, -9999.0]] * 8, dtype="float32"))},
        coords={"time": TIMES[:8]},
    ).to_zarr(str(filled), encoding={"t2m": {"_FillValue": -9999.0}}, consolidated=False)
    masked = xr.open_zarr(str(filled), consolidated=False)
    assert np.isnan(masked.t2m.values[:, 1]).all()  # what the user sees
    (batch,) = list(ib.build_loader(masked, split="all", batch_size=8, device="cpu"))
    np.testing.assert_array_equal(as_numpy(batch["t2m"]), masked.t2m.values)
    unmasked = xr.open_zarr(str(filled), consolidated=False, mask_and_scale=False)
    (batch,) = list(ib.build_loader(unmasked, split="all", batch_size=8, device="cpu"))
    np.testing.assert_array_equal(as_numpy(batch["t2m"]), unmasked.t2m.values)


def test_the_loader_imports_no_xarray_when_given_none(stores: dict[int, str]) -> None:
    code = (
        "import sys; sys.modules['xarray'] = None\n"
        "import insitubatch_nodes as ib\n"
        f"loader = ib.build_loader({stores[3]!r}, ['t2m'], splits={{'train': '2016-01'}}, "
        "levels=None, device='cpu', batch_size=4)\n"
        "print(sum(len(b['sample_index']) for b in loader))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str(TIMES.size)
