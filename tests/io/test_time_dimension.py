"""Dimensions by name, never by position: a variable is read along the dimension the store
names time (the time coordinate's); one without it (orography, a land-sea mask) is a
static field, the whole grid in every sample, never read as if latitude were time, even
when latitude has as many values as time (alone, it is refused by name); one whose time
dimension is not its first is refused naming its dimensions; and arrays that name no
dimensions keep axis 0 as time. On stores written by `to_zarr` (v2
and v3) and zarr-python, by URL and as a Dataset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
import zarr

import insitubatch_nodes as ib
from tests.helpers.batches import as_numpy
from tests.helpers.time_stores import hourly

STEPS = 6


# xarray's notes on v3 and consolidated metadata
pytestmark = pytest.mark.filterwarnings("ignore")


def _write(
    path: Path,
    *,
    lats: int,
    zarr_format: int,
    time: str = "time",
    extra: dict[str, tuple[tuple[str, ...], np.ndarray]] | None = None,
) -> str:
    """`t2m` (time, lat, lon) whose values are their step; `orog` (lat, lon), static."""
    n = STEPS
    t2m = np.broadcast_to(np.arange(n, dtype=np.float32)[:, None, None], (n, lats, 4)).copy()
    orog = np.full((lats, 4), -1.0, dtype=np.float32)
    data = {"t2m": ((time, "lat", "lon"), t2m), "orog": (("lat", "lon"), orog), **(extra or {})}
    ds = xr.Dataset(
        data,
        coords={
            time: hourly("2015-01-01", n),
            "lat": np.arange(float(lats)),
            "lon": np.arange(4.0),
        },
    )
    if time != "time":
        ds[time].attrs["standard_name"] = "time"
    encoding = {name: {"chunks": ds[name].shape} for name in data}
    ds.to_zarr(str(path), mode="w", zarr_format=zarr_format, encoding=encoding, consolidated=False)
    return str(path)


def _steps(url: str, variables: list[str] | None, **settings: Any) -> list[int]:
    loader = ib.build_loader(
        url, variables, split="all", batch_size=STEPS, evaluation=True, device="cpu", **settings
    )
    return sorted(i for b in loader for i in b["sample_index"].tolist())


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("lats", [STEPS, 3], ids=["lat-as-long-as-time", "lat-shorter"])
def test_a_variable_without_time_is_a_static_never_a_row_per_sample(
    tmp_path: Path, zarr_format: int, lats: int
) -> None:
    url = _write(tmp_path / "s.zarr", lats=lats, zarr_format=zarr_format)
    ds = xr.open_zarr(url, consolidated=False)
    for source in (url, ds[["t2m", "orog"]]):
        variables = ["t2m", "orog"] if source is url else None
        loader = ib.build_loader(
            source, variables, split="all", batch_size=STEPS, evaluation=True, device="cpu"
        )
        (batch,) = list(loader)
        assert as_numpy(batch["orog"]).shape == (STEPS, lats, 4)  # the grid, every sample
        assert (as_numpy(batch["orog"]) == -1.0).all()
    with pytest.raises(ValueError, match=r"the selected variables \['orog'\] are all static"):
        ib.build_loader(url, ["orog"])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_the_default_choice_leaves_out_arrays_without_time(
    tmp_path: Path, zarr_format: int
) -> None:
    url = _write(tmp_path / "s.zarr", lats=STEPS, zarr_format=zarr_format)
    source = ib.ZarrSource.open(url)
    assert list(source.layouts) == ["t2m"]
    loader = ib.build_loader(url, split="all", batch_size=STEPS, evaluation=True, device="cpu")
    (batch,) = list(loader)
    values = as_numpy(batch["t2m"])[:, 0, 0]
    assert values.tolist() == batch["sample_index"].tolist()


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_variable_with_time_not_first_is_refused_naming_its_dimensions(
    tmp_path: Path, zarr_format: int
) -> None:
    moved = np.zeros((3, STEPS, 4), dtype=np.float32)
    url = _write(
        tmp_path / "s.zarr",
        lats=3,
        zarr_format=zarr_format,
        extra={"tp": (("lat", "time", "lon"), moved)},
    )
    with pytest.raises(
        ValueError,
        match=r"variable 'tp' has dimensions \('lat', 'time', 'lon'\): its time dimension 'time' "
        r"is not its first",
    ):
        ib.build_loader(url, ["t2m", "tp"])
    with pytest.raises(ValueError, match=r"variable 'tp' has dimensions \('lat', 'time', 'lon'\)"):
        ib.build_loader(url)  # chosen by default too: it has time
    ds = xr.open_zarr(url, consolidated=False)
    with pytest.raises(ValueError, match=r"variable 'tp' has dimensions \('lat', 'time', 'lon'\)"):
        ib.build_loader(ds[["tp"]])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_valid_time_is_the_time_dimension_of_a_cds_era5_layout(
    tmp_path: Path, zarr_format: int
) -> None:
    url = _write(tmp_path / "era5.zarr", lats=STEPS, zarr_format=zarr_format, time="valid_time")
    assert _steps(url, ["t2m"]) == list(range(STEPS))
    source = ib.ZarrSource.open(url, ["t2m"], splits={"x": ("2015-01-01T02", "2015-01-01T03")})
    assert source.manifest.step_ranges("x").tolist() == [[2, 4]]
    (batch,) = list(
        ib.build_loader(url, ["t2m", "orog"], split="all", batch_size=STEPS, device="cpu")
    )
    assert as_numpy(batch["orog"]).shape == (STEPS, STEPS, 4)  # static beside valid_time


def test_zarr_python_arrays_naming_their_dimensions_are_read_by_them(tmp_path: Path) -> None:
    group = zarr.open_group(str(tmp_path / "z.zarr"), mode="w", zarr_format=3)
    group.create_array(
        "time", data=hourly("2015-01-01", STEPS).astype("M8[s]"), dimension_names=["time"]
    )
    group.create_array(
        "t2m", shape=(STEPS, STEPS), chunks=(2, STEPS), dtype="f4", dimension_names=["time", "x"]
    )[...] = 0
    group.create_array(
        "mask", shape=(STEPS, 2), chunks=(STEPS, 2), dtype="f4", dimension_names=["x", "y"]
    )[...] = 0
    url = str(tmp_path / "z.zarr")
    assert _steps(url, ["t2m"]) == list(range(STEPS))
    with pytest.raises(
        ValueError,
        match=r"static field 'mask' has dimensions \('x', 'y'\), and the grid of 't2m' is "
        r"\('x',\)",
    ):
        ib.build_loader(url, ["t2m", "mask"])


def test_arrays_that_name_no_dimensions_keep_axis_0_as_time(tmp_path: Path) -> None:
    group = zarr.open_group(str(tmp_path / "plain.zarr"), mode="w", zarr_format=3)
    group.create_array("x", shape=(STEPS, 3), chunks=(2, 3), dtype="f4")[...] = 1
    group.create_array("y", shape=(STEPS, 5, 2), chunks=(3, 5, 2), dtype="f4")[...] = 2
    assert _steps(str(tmp_path / "plain.zarr"), None) == list(range(STEPS))


def test_without_a_time_coordinate_the_shared_first_dimension_is_time(tmp_path: Path) -> None:
    """A store of samples (no dates): the variables' first dimension, when they share it;
    refused when they do not, since nothing says which one is time."""
    ds = xr.Dataset(
        {
            "a": (("sample", "x"), np.zeros((STEPS, 3), np.float32)),
            "b": (("sample", "y"), np.zeros((STEPS, 2), np.float32)),
            "c": (("x", "y"), np.zeros((3, 2), np.float32)),
        }
    )
    url = str(tmp_path / "samples.zarr")
    ds.to_zarr(url, mode="w", zarr_format=3, consolidated=False)
    assert _steps(url, ["a", "b"]) == list(range(STEPS))
    with pytest.raises(ValueError, match=r"name different first dimensions .*'c': \('x', 'y'\)"):
        ib.build_loader(url, ["a", "c"])


def test_a_1d_array_of_dates_naming_no_dimension_is_not_the_time_coordinate(
    tmp_path: Path,
) -> None:
    """Dates in a 1-D array that names no dimension (a log of when each sample was made,
    written by zarr-python) say nothing about which dimension is time."""
    group = zarr.open_group(str(tmp_path / "z.zarr"), mode="w", zarr_format=3)
    group.create_array("made", data=hourly("2015-01-01", 3).astype("M8[s]"))
    array = group.create_array(
        "a", shape=(STEPS, 2), chunks=(2, 2), dtype="f4", dimension_names=["sample", "x"]
    )
    array[...] = 0
    assert _steps(str(tmp_path / "z.zarr"), ["a"]) == list(range(STEPS))
