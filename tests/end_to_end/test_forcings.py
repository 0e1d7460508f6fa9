"""`build_loader(forcings=[...])` on real stores written by xarray's `to_zarr` (v2, v3): each
batch's forcings are those of its samples' valid times (`sample_index` -> the time
coordinate xarray decodes) and of the grid's coordinates as xarray shows them, for
windows and leads step by step, cropped with patches; resume is exact (elastic too); a state from a
loader with other forcings, unknown names, a grid without coordinates and the sun on a
model's calendar are refused by name. The formulas themselves are held to independent
implementations in `tests/core/test_forcings.py`; here the reference is those formulas
applied to what xarray reads, so these tests hold the wiring: which time, which place.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import xarray as xr
import zarr

from insitubatch_nodes import SAMPLE_INDEX_KEY, PatchSpec, SampleSpec, build_loader, leads, window
from insitubatch_nodes.core.forcing_names import FORCINGS
from insitubatch_nodes.core.forcings import forcing_values, grid_terms
from tests.helpers.batches import batch_key, torch_roundtrip
from tests.helpers.resume_check import check_every_cut

ALL = list(FORCINGS)
FOUR = [
    "cos_solar_zenith_angle",
    "toa_incident_solar_radiation",
    "year_progress_sin",
    "day_progress_cos",
]
cpu_loader = functools.partial(build_loader, device="cpu", split="all")


def _write(
    path: Path,
    *,
    zarr_format: int = 3,
    steps: int = 48,
    calendar: str | None = None,
    hours: int = 5,
) -> str:
    """An xarray store: t2m (time, latitude, longitude) on a 9 x 12 grid with latitude
    stored north to south (as ERA5) and longitude in [0, 360), time every `hours` hours
    from 2021-03-19 (or in `calendar`, cftime dates), 4 steps per chunk."""
    if calendar is None:
        times: Any = np.datetime64("2021-03-19T01", "ns") + np.arange(steps) * np.timedelta64(
            hours, "h"
        )
    else:
        import cftime

        times = cftime.num2date(np.arange(steps) * hours, "hours since 2021-03-19 01:00", calendar)
    latitude = np.linspace(80.0, -80.0, 9)
    longitude = np.arange(0.0, 360.0, 30.0)
    values = np.random.default_rng(0).random((steps, 9, 12), dtype=np.float32)
    ds = xr.Dataset(
        {"t2m": (("time", "latitude", "longitude"), values)},
        coords={"time": times, "latitude": latitude, "longitude": longitude},
    )
    url = str(path / f"forcings_v{zarr_format}.zarr")
    encoding = {"t2m": {"chunks": (4, 9, 12)}}
    ds.to_zarr(url, mode="w", zarr_format=zarr_format, consolidated=False, encoding=encoding)
    return url


def _reference(
    url: str, names: list[str], steps: np.ndarray, calendar: str
) -> dict[str, np.ndarray]:
    """The forcings at stored steps `steps` (any shape), from what xarray reads: its decoded
    times (seconds since the calendar's 1970-01-01) and its coordinates."""
    coder = xr.coders.CFDatetimeCoder(use_cftime=calendar != "proleptic_gregorian")
    ds = xr.open_zarr(url, consolidated=False, decode_times=coder)
    times = ds["time"].values[steps]
    if calendar == "proleptic_gregorian":
        seconds = times.astype("M8[us]").astype(np.int64) / 1e6
    else:
        import cftime

        seconds = np.asarray(
            cftime.date2num(times, "seconds since 1970-01-01", calendar), np.float64
        )
    latitude = ds["latitude"].values[:, None]
    longitude = ds["longitude"].values[None, :]
    terms = grid_terms(latitude[None, None], longitude[None, None], np.asarray)
    values = forcing_values(
        np, names, seconds.reshape(len(steps), -1), calendar, terms, np.asarray, 2
    )
    shape = (
        len(steps),
        seconds.reshape(len(steps), -1).shape[1],
        *np.broadcast_shapes(latitude.shape, longitude.shape),
    )
    return {name: np.broadcast_to(value, shape) for name, value in values.items()}


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_each_batch_holds_its_samples_forcings(tmp_path: Path, zarr_format: int) -> None:
    url = _write(tmp_path, zarr_format=zarr_format)
    loader = cpu_loader(url, ["t2m"], batch_size=8, forcings=ALL, seed=3)
    seen = 0
    for batch in loader:
        index = batch[SAMPLE_INDEX_KEY].numpy()
        expected = _reference(url, ALL, index[:, None], "proleptic_gregorian")
        for name in ALL:
            got = batch[name]
            assert got.shape == (len(index), 9, 12) and got.dtype == torch.float32, name
            scale = 1361.0 * 3600 if name == "toa_incident_solar_radiation" else 1.0
            np.testing.assert_allclose(
                got.numpy(), expected[name][:, 0], atol=1e-5 * scale, err_msg=name
            )
        seen += len(index)
    assert seen == 48
    # the place as xarray shows it: latitude stored north to south, longitude 0..330
    ds = xr.open_zarr(url, consolidated=False)
    np.testing.assert_allclose(
        batch["cos_latitude"][0, :, 0].numpy(), np.cos(np.deg2rad(ds.latitude.values)), atol=1e-6
    )
    np.testing.assert_allclose(
        batch["sin_longitude"][0, 0].numpy(), np.sin(np.deg2rad(ds.longitude.values)), atol=1e-6
    )


def test_on_the_producer_thread_the_batches_are_the_same(tmp_path: Path) -> None:
    """On the CPU the forcings are computed before the device node, so with
    `device_prefetch` its producer thread computes them while the step runs."""
    url = _write(tmp_path)
    settings = {"batch_size": 8, "forcings": ALL, "seed": 3}
    inline = [batch_key(b) for b in cpu_loader(url, ["t2m"], **settings)]
    ahead = [batch_key(b) for b in cpu_loader(url, ["t2m"], device_prefetch=2, **settings)]
    assert ahead == inline


def test_the_sun_shines_where_it_is_day(tmp_path: Path) -> None:
    """An independent check of the place and time together: at 06:00 UTC near the March
    equinox the sun stands over the equator at about 90 E (cos zenith ~1), and it is night
    at 270 E."""
    url = _write(tmp_path, steps=8, hours=1)  # 01:00 .. 08:00
    ds = xr.open_zarr(url, consolidated=False)
    six = int(np.flatnonzero(ds.time.values == np.datetime64("2021-03-19T06"))[0])
    loader = cpu_loader(
        url,
        ["t2m"],
        batch_size=8,
        forcings=["cos_solar_zenith_angle"],
        shuffle="block",
        evaluation=True,
    )
    batch = next(iter(loader))
    row = int(np.flatnonzero(batch[SAMPLE_INDEX_KEY].numpy() == six)[0])
    equator = 4  # latitude 0 of 80 .. -80
    cosine = batch["cos_solar_zenith_angle"][row, equator].numpy()
    # 06:00 UTC: the sun over longitude 90 E (equation of time -8 min: 88 E)
    assert cosine[3] > 0.99  # longitude 90
    assert cosine[9] == 0.0  # longitude 270: night


def test_windows_and_leads_carry_each_steps_forcings(tmp_path: Path) -> None:
    url = _write(tmp_path)
    spec = SampleSpec({"inputs": window(["t2m"], steps=2), "targets": leads(["t2m"], [1, 3])})
    loader = cpu_loader(url, batch_size=4, spec=spec, stride=2, forcings=FOUR, seed=1)
    offsets = {"inputs": np.array([-2, 0]), "targets": np.array([2, 6])}  # in stored steps
    for batch in loader:
        index = batch[SAMPLE_INDEX_KEY].numpy()
        for group, steps in offsets.items():
            expected = _reference(url, FOUR, index[:, None] + steps[None, :], "proleptic_gregorian")
            for name in FOUR:
                got = batch[f"{group}/{name}"]
                assert got.shape == (len(index), 2, 9, 12)
                scale = 1361.0 * 3600 if name == "toa_incident_solar_radiation" else 1.0
                np.testing.assert_allclose(got.numpy(), expected[name], atol=1e-5 * scale)


def test_patches_crop_forcings_at_each_samples_origin(tmp_path: Path) -> None:
    url = _write(tmp_path)
    names = ["cos_solar_zenith_angle", "cos_latitude", "day_progress_sin", "year_progress_cos"]
    loader = cpu_loader(
        url, ["t2m"], batch_size=8, patches=PatchSpec((4, 5)), forcings=names, seed=2
    )
    ds = xr.open_zarr(url, consolidated=False)
    for batch in loader:
        index = batch[SAMPLE_INDEX_KEY].numpy()
        origin = batch["patch_origin"].numpy()
        expected = _reference(url, names, index[:, None], "proleptic_gregorian")
        for row, (y, x) in enumerate(origin):
            window_t2m = ds.t2m.values[index[row], y : y + 4, x : x + 5]
            np.testing.assert_array_equal(batch["t2m"][row].numpy(), window_t2m)
            for name in names:
                got = batch[name][row].numpy()
                assert got.shape == (4, 5)
                np.testing.assert_allclose(
                    got, expected[name][row, 0, y : y + 4, x : x + 5], atol=1e-5
                )


def test_resume_mid_epoch_is_exact(tmp_path: Path) -> None:
    url = _write(tmp_path)
    check_every_cut(
        lambda: cpu_loader(url, ["t2m"], batch_size=6, forcings=FOUR, seed=4, split="train").root,
        cuts=[0, 1, 3],
    )


def test_a_state_from_other_forcings_is_refused_by_name(tmp_path: Path) -> None:
    url = _write(tmp_path)
    saved = cpu_loader(url, ["t2m"], batch_size=6, forcings=["cos_latitude"])
    iterator = iter(saved)
    next(iterator)
    state = torch_roundtrip(saved.state_dict())
    rest = [batch_key(b) for b in iterator]

    def resumed(**settings: Any) -> Any:
        loader = cpu_loader(url, ["t2m"], batch_size=6, **settings)
        loader.load_state_dict(state)
        return loader

    with pytest.raises(
        ValueError,
        match=(
            r"forcings \['cos_latitude'\] when the state was saved, now \['cos_latitude', "
            r"'year_progress_sin'\]; rebuild the loader with forcings=\['cos_latitude'\]"
        ),
    ):
        next(iter(resumed(forcings=["cos_latitude", "year_progress_sin"])))
    with pytest.raises(ValueError, match="forcings="):
        next(iter(resumed()))
    assert [batch_key(b) for b in resumed(forcings=["cos_latitude"])] == rest


def test_unknown_forcing_is_refused_listing_the_known_ones(tmp_path: Path) -> None:
    url = _write(tmp_path)
    with pytest.raises(
        ValueError, match=r"unknown forcing 'zenith'; the known forcings are \['cos_latitude', "
    ):
        cpu_loader(url, ["t2m"], forcings=["zenith"])


def test_a_grid_without_coordinates_refuses_the_forcings_of_the_place(tmp_path: Path) -> None:
    """zarr-python arrays without dimension names: no latitude to find; the forcings of
    the time alone still work."""
    root = zarr.open_group(str(tmp_path / "plain.zarr"), mode="w", zarr_format=3)
    root.create_array("t2m", data=np.zeros((16, 3, 4), np.float32), chunks=(4, 3, 4))
    time = root.create_array("time", data=np.arange(16, dtype=np.int64), chunks=(16,))
    time.attrs["units"] = "hours since 2000-01-01"
    url = str(tmp_path / "plain.zarr")
    with pytest.raises(
        ValueError,
        match=(
            r"\['cos_latitude'\] are computed from the grid's latitude and longitude: .* has "
            r"no latitude for the grid axes unnamed"
        ),
    ):
        cpu_loader(url, ["t2m"], forcings=["cos_latitude"], batch_size=4)
    batch = next(iter(cpu_loader(url, ["t2m"], forcings=["year_progress_sin"], batch_size=4)))
    assert batch["year_progress_sin"].shape == (4, 3, 4)


def test_a_grid_with_cf_coordinates_over_both_axes_is_found(tmp_path: Path) -> None:
    """A projected grid (HRRR-like): 2-D latitude/longitude over (y, x), found by their CF
    standard_name and units for the forcings, which need each point's place; `area=`, which
    needs a box of rows and columns, refuses the same grid."""
    lat = np.linspace(20, 50, 12).reshape(3, 4)
    lon = np.linspace(-130, -60, 12).reshape(3, 4)
    ds = xr.Dataset(
        {"t2m": (("time", "y", "x"), np.zeros((8, 3, 4), np.float32))},
        coords={
            "time": np.datetime64("2020-01-01", "ns") + np.arange(8) * np.timedelta64(1, "h"),
            "gridlat": (("y", "x"), lat, {"standard_name": "latitude"}),
            "gridlon": (("y", "x"), lon, {"units": "degrees_east"}),
        },
    )
    url = str(tmp_path / "projected.zarr")
    ds.to_zarr(url, zarr_format=3, consolidated=False)
    batch = next(
        iter(cpu_loader(url, ["t2m"], forcings=["cos_latitude", "cos_longitude"], batch_size=4))
    )
    np.testing.assert_allclose(batch["cos_latitude"][0].numpy(), np.cos(np.deg2rad(lat)), atol=1e-6)
    np.testing.assert_allclose(
        batch["cos_longitude"][0].numpy(), np.cos(np.deg2rad(lon)), atol=1e-6
    )
    # area= still refuses the curvilinear grid by name: its box is no box of rows and columns
    with pytest.raises(ValueError, match="area= needs 1-D latitude and longitude coordinates"):
        cpu_loader(url, ["t2m"], forcings=["cos_latitude"], area=(40, -120, 30, -70))


@pytest.mark.parametrize("calendar", ["noleap", "360_day"])
def test_a_models_calendar_refuses_the_sun_and_counts_its_own_year(
    tmp_path: Path, calendar: str
) -> None:
    url = _write(tmp_path, calendar=calendar)
    with pytest.raises(
        ValueError,
        match=rf"\['cos_solar_zenith_angle'\] need real dates .* the '{calendar}' calendar",
    ):
        cpu_loader(url, ["t2m"], forcings=["cos_solar_zenith_angle", "year_progress_cos"])
    names = ["year_progress_sin", "year_progress_cos", "day_progress_sin"]
    loader = cpu_loader(url, ["t2m"], batch_size=8, forcings=names)
    days = {"noleap": 365, "360_day": 360}[calendar]
    for batch in loader:
        index = batch[SAMPLE_INDEX_KEY].numpy()
        expected = _reference(url, names, index[:, None], calendar)
        for name in names:
            np.testing.assert_allclose(batch[name].numpy(), expected[name][:, 0], atol=1e-5)
    # 2021-03-19 01:00 is day 77 (0-based) of a noleap year, day 78 of a 360_day one
    first = {"noleap": 77, "360_day": 78}[calendar] + 1 / 24
    step0 = cpu_loader(
        url,
        ["t2m"],
        batch_size=48,
        forcings=["year_progress_sin"],
        shuffle="block",
        evaluation=True,
    )
    batch = next(iter(step0))
    row = int(np.flatnonzero(batch[SAMPLE_INDEX_KEY].numpy() == 0)[0])
    np.testing.assert_allclose(
        batch["year_progress_sin"][row, 0, 0].item(), np.sin(2 * np.pi * first / days), atol=1e-6
    )


def test_a_dataset_selection_crops_the_forcings(tmp_path: Path) -> None:
    """The Dataset route: a spatial slice of `xr.open_zarr(url)` is a region, and the
    forcings are those of the region's points."""
    url = _write(tmp_path)
    ds = xr.open_zarr(url, consolidated=False).isel(latitude=slice(2, 6), longitude=slice(3, 10))
    loader = build_loader(
        ds[["t2m"]],
        device="cpu",
        split="all",
        batch_size=8,
        forcings=["cos_latitude", "sin_longitude"],
    )
    batch = next(iter(loader))
    assert batch["cos_latitude"].shape == (8, 4, 7)
    np.testing.assert_allclose(
        batch["cos_latitude"][0, :, 0].numpy(), np.cos(np.deg2rad(ds.latitude.values)), atol=1e-6
    )
    np.testing.assert_allclose(
        batch["sin_longitude"][0, 0].numpy(), np.sin(np.deg2rad(ds.longitude.values)), atol=1e-6
    )


@pytest.mark.parametrize(
    ("area", "rows", "columns"),
    [
        ((40, 30, -20, 120), [2, 3, 4, 5], [1, 2, 3, 4]),
        # across the stored 0/360 seam: 300, 330, 0, 30, 60 eastward
        ((40, -60, -20, 60), [2, 3, 4, 5], [10, 11, 0, 1, 2]),
    ],
)
def test_an_area_crops_the_forcings_to_its_box(
    tmp_path: Path, area: tuple[float, ...], rows: list[int], columns: list[int]
) -> None:
    """With `area=`, each sample's forcings are those of the box's grid points in the
    batch's order (the rows and columns `loader.area` keeps), as the fields are: the whole
    grid's forcings of the same sample taken at the box's rows and columns."""
    url = _write(tmp_path)
    whole = cpu_loader(url, ["t2m"], batch_size=8, forcings=ALL, seed=3)
    boxed = cpu_loader(url, ["t2m"], batch_size=8, forcings=ALL, seed=3, area=area)
    assert boxed.area is not None
    assert boxed.area.rows.tolist() == rows and boxed.area.columns.tolist() == columns
    ds = xr.open_zarr(url, consolidated=False)
    np.testing.assert_array_equal(boxed.area.latitudes, ds.latitude.values[rows])
    np.testing.assert_array_equal(boxed.area.longitudes, ds.longitude.values[columns])
    seen = 0
    for full, box in zip(whole, boxed, strict=True):
        index = box[SAMPLE_INDEX_KEY].numpy()
        np.testing.assert_array_equal(index, full[SAMPLE_INDEX_KEY].numpy())
        np.testing.assert_array_equal(
            box["t2m"].numpy(), full["t2m"].numpy()[:, rows][:, :, columns]
        )
        expected = _reference(url, ALL, index[:, None], "proleptic_gregorian")
        for name in ALL:
            got = box[name].numpy()
            assert got.shape == (len(index), len(rows), len(columns)), name
            scale = 1361.0 * 3600 if name == "toa_incident_solar_radiation" else 1.0
            # the whole grid's sun is computed by rows and columns, the box's point by
            # point (too few columns to gain): the same numbers within float32 rounding
            np.testing.assert_allclose(
                got,
                full[name].numpy()[:, rows][:, :, columns],
                rtol=0,
                atol=5e-6 * scale,
                err_msg=name,
            )
            np.testing.assert_allclose(
                got, expected[name][:, 0][:, rows][:, :, columns], atol=1e-5 * scale, err_msg=name
            )
        seen += len(index)
    assert seen == 48
    np.testing.assert_allclose(
        box["sin_longitude"][0, 0].numpy(),
        np.sin(np.deg2rad(boxed.area.longitudes)),
        atol=1e-6,
    )


def test_a_variable_named_like_a_forcing_is_refused(tmp_path: Path) -> None:
    url = _write(tmp_path)
    ds = xr.open_zarr(url, consolidated=False)
    ds["cos_latitude"] = ds["t2m"]
    other = str(tmp_path / "clash.zarr")
    ds.to_zarr(other, zarr_format=3, consolidated=False)
    with pytest.raises(
        ValueError, match=r"batch keys \['cos_latitude'\] are already a batch's keys"
    ):
        cpu_loader(other, ["t2m", "cos_latitude"], forcings=["cos_latitude"])


@pytest.mark.parametrize("stack", [False, True])
def test_normalise_leaves_forcings_as_defined(tmp_path: Path, stack: bool) -> None:
    """Statistics cover the stored variables; the forcings beside them (or, stacked, their
    channels of the stack) are the same numbers with and without `normalise=`."""
    from insitubatch_nodes import compute_stats

    url = _write(tmp_path)
    settings = {"batch_size": 8, "forcings": FOUR, "seed": 6, "stack": stack}
    plain = next(iter(cpu_loader(url, ["t2m"], **settings)))
    stats = compute_stats(url, ["t2m"], split="all")
    normalised = next(iter(cpu_loader(url, ["t2m"], normalise=stats, **settings)))
    np.testing.assert_array_equal(normalised[SAMPLE_INDEX_KEY], plain[SAMPLE_INDEX_KEY])
    if stack:  # (batch, channels, *grid): t2m, then the forcings
        assert not torch.equal(normalised["fields"][:, 0], plain["fields"][:, 0])
        assert torch.equal(normalised["fields"][:, 1:], plain["fields"][:, 1:])
        return
    assert not torch.equal(normalised["t2m"], plain["t2m"])  # the field was normalised
    for name in FOUR:
        assert torch.equal(normalised[name], plain[name]), name


def test_stacked_forcings_are_channels_between_the_variables_and_the_statics(
    tmp_path: Path,
) -> None:
    """`stack=True`: each group's tensor takes the forcings after its variables (and their
    levels) and before its statics, with the group's steps; `loader.channels` names them;
    the values are the unstacked loader's."""
    url = _write(tmp_path)
    ds = xr.open_zarr(url, consolidated=False)
    ds["land_sea_mask"] = (("latitude", "longitude"), np.ones((9, 12), np.float32))
    other = str(tmp_path / "with_static.zarr")
    ds.to_zarr(other, zarr_format=3, consolidated=False)
    names = ["cos_latitude", "year_progress_sin"]
    spec = SampleSpec(
        {"inputs": window(["t2m", "land_sea_mask"], steps=2), "targets": leads(["t2m"], [1])}
    )
    settings = {"batch_size": 4, "spec": spec, "forcings": names, "seed": 2}
    stacked = cpu_loader(other, stack=True, **settings)
    assert stacked.channels == {
        "inputs": ["t2m", *names, "land_sea_mask"],
        "targets": ["t2m", *names],
    }
    apart = cpu_loader(other, **settings)
    for together, alone in zip(stacked, apart, strict=True):
        np.testing.assert_array_equal(together[SAMPLE_INDEX_KEY], alone[SAMPLE_INDEX_KEY])
        assert together["inputs"].shape[1:] == (2, 4, 9, 12)  # steps, channels, grid
        assert set(together) == {"inputs", "targets", SAMPLE_INDEX_KEY}
        for group in ("inputs", "targets"):
            for channel, name in enumerate(names, start=1):
                np.testing.assert_array_equal(
                    together[group][:, :, channel].numpy(), alone[f"{group}/{name}"].numpy()
                )
        ones = together["inputs"][:, :, 3].numpy()
        assert np.array_equal(ones, np.ones_like(ones))  # the static, after the forcings


def test_an_elastic_resume_keeps_each_samples_forcings(tmp_path: Path) -> None:
    """Two ranks cut mid-epoch, resumed on one: every sample once, each batch's forcings
    those of its samples."""
    from collections import Counter

    from insitubatch_nodes.loader.rank_states import RANK_STATES_KEY

    url = _write(tmp_path)

    def ranks(world: int) -> list[Any]:
        return [
            cpu_loader(url, ["t2m"], batch_size=4, forcings=FOUR, seed=5, rank=r, world_size=world)
            for r in range(world)
        ]

    seen: list[int] = []
    first = ranks(2)
    iterators = [iter(loader) for loader in first]
    for iterator in iterators:
        for _ in range(2):
            seen += next(iterator)[SAMPLE_INDEX_KEY].tolist()
    state = torch_roundtrip({RANK_STATES_KEY: [loader.state_dict() for loader in first]})
    for loader in first:
        loader.close()
    (resumed,) = ranks(1)
    resumed.load_state_dict(state)
    for batch in resumed:
        index = batch[SAMPLE_INDEX_KEY].numpy()
        seen += index.tolist()
        expected = _reference(url, FOUR, index[:, None], "proleptic_gregorian")
        for name in FOUR:
            scale = 1361.0 * 3600 if name == "toa_incident_solar_radiation" else 1.0
            np.testing.assert_allclose(batch[name].numpy(), expected[name][:, 0], atol=1e-5 * scale)
    assert Counter(seen) == Counter(range(48))


def test_forcings_by_group_go_to_those_groups_only(tmp_path: Path) -> None:
    """`forcings={"inputs": [...]}`: the inputs take them at each of their steps, as the
    list form gives them, and the targets none (a model predicts no forcing); stacked,
    they are channels of the inputs only. A state records the choice: one saved with the
    list form is refused by name by a loader with the mapping, and the other way round."""
    url = _write(tmp_path)
    spec = SampleSpec({"inputs": window(["t2m"], steps=2), "targets": leads(["t2m"], [1])})
    settings = {"batch_size": 4, "spec": spec, "seed": 5}
    by_group = cpu_loader(url, forcings={"inputs": FOUR}, **settings)
    every = cpu_loader(url, forcings=FOUR, **settings)
    for mine, theirs in zip(by_group, every, strict=True):
        assert set(mine) == {"inputs/t2m", "targets/t2m", SAMPLE_INDEX_KEY} | {
            f"inputs/{name}" for name in FOUR
        }
        for name in FOUR:
            assert mine[f"inputs/{name}"].shape == (len(mine[SAMPLE_INDEX_KEY]), 2, 9, 12)
            np.testing.assert_array_equal(mine[f"inputs/{name}"], theirs[f"inputs/{name}"])
    stacked = cpu_loader(url, forcings={"inputs": FOUR, "targets": []}, stack=True, **settings)
    assert stacked.channels == {"inputs": ["t2m", *FOUR], "targets": ["t2m"]}
    batch = next(iter(stacked))
    assert batch["inputs"].shape == (4, 2, 5, 9, 12) and batch["targets"].shape == (4, 1, 1, 9, 12)
    state = torch_roundtrip(every.state_dict())
    with pytest.raises(ValueError, match=r"rebuild the loader with forcings=\['cos_solar"):
        by_group.load_state_dict(state)
        next(iter(by_group))
    state = torch_roundtrip(by_group.state_dict())
    with pytest.raises(ValueError, match=r"rebuild the loader with forcings=\{'inputs': \["):
        every.load_state_dict(state)
        next(iter(every))
