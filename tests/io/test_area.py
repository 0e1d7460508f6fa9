"""`area=(north, west, south, east)` on real stores (xarray's `to_zarr`, v2 and v3,
latitudes ascending and descending, longitudes in [0, 360) and [-180, 180)): every sample
of an epoch holds what xarray's `sel` (with `concat` or `roll` across the seam) holds,
NaN where it has NaN; only the chunks the box touches are read; with levels, windows and
patches; resume mid-epoch and elastic resume stay exact; what cannot be cropped is
refused by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import xarray as xr
import zarr

import insitubatch_nodes as ib
from insitubatch_nodes.cli.main import main
from insitubatch_nodes.core.area import Area
from insitubatch_nodes.core.batch_fields import PATCH_ORIGIN_KEY, SAMPLE_INDEX_KEY
from insitubatch_nodes.loader.rank_states import RANK_STATES_KEY
from tests.helpers.area_stores import CHUNKS, grid_dataset, write_grid_store, xarray_area
from tests.helpers.batches import as_numpy, torch_roundtrip
from tests.helpers.graphs import build_stage
from tests.helpers.resume_check import check_every_cut

KINDS = {
    "v2 descending [0, 360)": (2, True, False),
    "v3 ascending [0, 360)": (3, False, False),
    "v3 descending [-180, 180)": (3, True, True),
    "v2 ascending [-180, 180)": (2, False, True),
}
BOXES = {
    "across 0/360": (60, -30, 20, 40),
    "across the dateline": (30, 150, -30, -150),
    "inside": (80, 10, 10, 100),
    "whole circle from 180": (90, -180, -90, 180),
    "one point, edges within 1e-6": (40 + 1e-7, 20 - 1e-7, 40, 20),
    "a pole row": (90, 0, 90, 350),
}


# xarray's and zarr's notes on v2, v3 and consolidated metadata
pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("area")
    return {
        kind: write_grid_store(
            root / f"{i}.zarr", zarr_format=fmt, descending=descending, signed=signed
        )
        for i, (kind, (fmt, descending, signed)) in enumerate(KINDS.items())
    }


def _epoch(url: str, **settings: Any) -> tuple[dict[str, np.ndarray], Any]:
    """One shuffled epoch's batches, concatenated, and its loader."""
    settings.setdefault("batch_size", 5)
    loader = ib.build_loader(url, split="all", device="cpu", seed=1, **settings)
    batches = [{k: as_numpy(v) for k, v in b.items()} for b in loader]
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}, loader


@pytest.mark.parametrize("box", list(BOXES))
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_sample_is_what_xarray_selects(stores: dict[str, str], kind: str, box: str) -> None:
    url = stores[kind]
    got, loader = _epoch(url, variables=["t2m", "z"], area=BOXES[box])
    want = xarray_area(xr.open_zarr(url, consolidated=False), *BOXES[box])
    steps = got[SAMPLE_INDEX_KEY]
    assert sorted(steps.tolist()) == list(range(12))  # every sample of the epoch, once
    for name in ("t2m", "z"):
        np.testing.assert_array_equal(got[name], want[name].values[steps], err_msg=name)
    # the loader says where its grid lies: the batch's latitudes and longitudes, in order
    np.testing.assert_array_equal(loader.area.latitudes, want.latitude.values)
    np.testing.assert_array_equal(loader.area.longitudes, want.longitude.values)


def _touched(url: str, box: tuple[float, ...]) -> tuple[int, int]:
    """The latitude and longitude chunks holding a grid point of the box."""
    ds = xr.open_zarr(url, consolidated=False)
    kept = xarray_area(ds, *box)
    rows = {int(np.flatnonzero(ds.latitude.values == v)[0]) for v in kept.latitude.values}
    columns = {int(np.flatnonzero(ds.longitude.values == v)[0]) for v in kept.longitude.values}
    return (
        len({r // CHUNKS["latitude"] for r in rows}),
        len({c // CHUNKS["longitude"] for c in columns}),
    )


@pytest.mark.parametrize("box", ["across 0/360", "across the dateline", "inside"])
@pytest.mark.parametrize("kind", ["v2 descending [0, 360)", "v3 descending [-180, 180)"])
def test_only_the_chunks_the_box_touches_are_read(
    stores: dict[str, str], kind: str, box: str
) -> None:
    """Chunks read in an epoch: each (time, latitude, longitude) chunk holding a grid point
    of the box, once; with levels, only the level chunks holding a picked level too."""
    url = stores[kind]
    rows, columns = _touched(url, BOXES[box])
    time_chunks = 12 // CHUNKS["time"]
    _, loader = _epoch(url, variables=["t2m"], area=BOXES[box])
    assert loader.stats()["chunks_read"] == time_chunks * rows * columns
    _, whole = _epoch(url, variables=["t2m"])
    assert whole.stats()["chunks_read"] == time_chunks * 4 * 5  # 19 rows in 5s, 36 in 8s
    _, leveled = _epoch(url, variables=["z"], area=BOXES[box], levels=[500, 1000])
    assert leveled.stats()["chunks_read"] == time_chunks * 2 * rows * columns


SPEC = ib.SampleSpec(
    {"inputs": ib.window(["t2m", "z"], steps=2, stride=1), "targets": ib.leads(["t2m"], [1])}
)


@pytest.mark.parametrize("gather", ["host", "device"])
@pytest.mark.parametrize(
    "patches", [None, ib.PatchSpec((2, 3)), ib.PatchSpec((2, 3), "tiles")], ids=str
)
@pytest.mark.parametrize("box", ["across 0/360", "across the dateline"])
def test_levels_windows_and_patches_within_the_area(
    stores: dict[str, str], box: str, patches: ib.PatchSpec | None, gather: str
) -> None:
    """Levels out of the stored order, a window and a lead, random patches or tiles of the box's
    grid, on the host gather and the device gather (blocks as CPU tensors): each batch
    array is xarray's box at its samples' steps, levels and crops."""
    url = stores["v2 descending [0, 360)"]
    levels = [500, 1000, 850]
    on = {"decode_on": torch.device("cpu")} if gather == "device" else {}
    node = build_stage(
        url, "gather", spec=SPEC, patches=patches, levels=levels, area=Area(*BOXES[box]), **on
    )
    ds = xarray_area(xr.open_zarr(url, consolidated=False), *BOXES[box]).sel(level=levels)
    count = 0
    for batch in ib.Loader(node):
        got = {k: as_numpy(v) for k, v in batch.items()}
        anchors = got[SAMPLE_INDEX_KEY]
        for key, _, variable, offsets in SPEC.fields():
            want = ds[variable].values[anchors[:, None] + np.array(offsets)]
            if patches is not None:
                want = np.stack(
                    [
                        sample[..., o0 : o0 + 2, o1 : o1 + 3]
                        for sample, (o0, o1) in zip(want, got[PATCH_ORIGIN_KEY], strict=True)
                    ]
                )
            np.testing.assert_array_equal(got[key], want, err_msg=key)
        count += 1
    assert count >= 2


@pytest.mark.parametrize("patches", [None, ib.PatchSpec((2, 2))])
def test_an_area_resumes_exactly_mid_epoch(stores: dict[str, str], patches: Any) -> None:
    url = stores["v2 ascending [-180, 180)"]
    check_every_cut(
        lambda: build_stage(
            url,
            "device",
            spec=SPEC,
            patches=patches,
            levels=[250, 850],
            area=Area(*BOXES["across the dateline"]),
            batch_size=3,
        )
    )


def test_an_area_resumes_on_another_world_size(stores: dict[str, str]) -> None:
    """Two ranks cut mid-epoch, resumed on three: every sample of the epoch once, each the
    box xarray selects."""
    url = stores["v3 descending [-180, 180)"]
    box = BOXES["across the dateline"]
    ds = xarray_area(xr.open_zarr(url, consolidated=False), *box)

    def group(world: int) -> list[Any]:
        return [
            ib.build_loader(
                url,
                ["t2m"],
                "all",
                batch_size=2,
                rank=r,
                world_size=world,
                seed=2,
                device="cpu",
                area=box,
            )
            for r in range(world)
        ]

    seen: list[int] = []
    two = group(2)
    for loader in two:
        iterator = iter(loader)
        for _ in range(1):
            batch = next(iterator)
            seen += batch[SAMPLE_INDEX_KEY].tolist()
    state = torch_roundtrip(
        json.loads(json.dumps({RANK_STATES_KEY: [x.state_dict() for x in two]}))
    )
    for loader in group(3):
        loader.load_state_dict(state)
        for batch in loader:
            steps = batch[SAMPLE_INDEX_KEY].numpy()
            np.testing.assert_array_equal(batch["t2m"].numpy(), ds.t2m.values[steps])
            seen += steps.tolist()
    assert set(seen) == set(range(12))


def test_a_state_of_another_area_is_refused_by_name(stores: dict[str, str]) -> None:
    url = stores["v3 ascending [0, 360)"]
    loader = ib.build_loader(url, ["t2m"], batch_size=2, device="cpu", area=(60, -30, 20, 40))
    next(iter(loader))
    state = loader.state_dict()
    for other in [(60, -30, 20, 50), None]:
        moved = ib.build_loader(url, ["t2m"], batch_size=2, device="cpu", area=other)
        with pytest.raises(
            ValueError,
            match=r"kept positions \(levels, an area\) were .*saved with area= "
            r"\(60\.0, -30\.0, 20\.0, 40\.0\)",
        ):
            moved.load_state_dict(state)
            next(iter(moved))
    same = ib.build_loader(url, ["t2m"], batch_size=2, device="cpu", area=[60, -30, 20, 40])
    same.load_state_dict(state)
    next(iter(same))


def test_refusals_name_what_is_wrong(stores: dict[str, str], tmp_path: Path) -> None:
    url = stores["v3 ascending [0, 360)"]
    with pytest.raises(ValueError, match=r"north 10\.0 < south 20\.0"):
        ib.build_loader(url, ["t2m"], device="cpu", area=(10, 0, 20, 30))
    with pytest.raises(ValueError, match=r"4 finite numbers"):
        ib.build_loader(url, ["t2m"], device="cpu", area=(10, 0, 20))
    with pytest.raises(ValueError, match=r"holds no grid point .* no longitude is inside"):
        ib.build_loader(url, ["t2m"], device="cpu", area=(60, 1, 20, 9))
    with pytest.raises(ValueError, match=r"larger than the area's grid \(5, 8\)"):
        ib.build_loader(
            url, ["t2m"], device="cpu", area=(60, -30, 20, 40), patches=ib.PatchSpec((6, 2))
        )
    plain = tmp_path / "plain.zarr"
    xr.Dataset(
        {"v": (("time", "y", "x"), np.zeros((8, 3, 4), np.float32))},
        coords={"time": np.arange(8)},
    ).to_zarr(str(plain), consolidated=False)
    with pytest.raises(
        ValueError, match=r"'v'.*dimensions \['y', 'x'\] has a 1-D latitude or longitude"
    ):
        ib.build_loader(str(plain), ["v"], device="cpu", area=(60, -30, 20, 40))
    curvilinear = tmp_path / "curvilinear.zarr"
    xr.Dataset(
        {"v": (("time", "y", "x"), np.zeros((8, 3, 4), np.float32))},
        coords={
            "time": np.arange(8),
            "latitude": (("y", "x"), np.zeros((3, 4))),
            "longitude": (("y", "x"), np.zeros((3, 4))),
        },
    ).to_zarr(str(curvilinear), consolidated=False)
    with pytest.raises(ValueError, match=r"curvilinear grid: \['latitude', 'longitude'\] are 2-D"):
        ib.build_loader(str(curvilinear), ["v"], device="cpu", area=(60, -30, 20, 40))


def test_coordinates_are_found_by_units_and_standard_name(tmp_path: Path) -> None:
    """Dimensions named neither latitude nor lat: CF attributes say which is which."""
    path = tmp_path / "cf.zarr"
    ds = xr.Dataset(
        {"v": (("time", "y", "x"), np.arange(8 * 3 * 4, dtype=np.float32).reshape(8, 3, 4))},
        coords={"time": np.arange(8), "y": [10.0, 20.0, 30.0], "x": [0.0, 90.0, 180.0, 270.0]},
    )
    ds.y.attrs["units"] = "degrees_north"
    ds.x.attrs["standard_name"] = "longitude"
    ds.to_zarr(str(path), consolidated=False)
    got, loader = _epoch(str(path), variables=["v"], area=(25, 250, 5, 95), batch_size=8)
    want = xr.concat(
        [ds.v.sel(y=slice(5, 25), x=slice(250, None)), ds.v.sel(y=slice(5, 25), x=slice(None, 95))],
        dim="x",
    )
    np.testing.assert_array_equal(got["v"], want.values[got[SAMPLE_INDEX_KEY]])
    assert loader.area.shape == (2, 3)
    assert zarr.open_group(str(path), mode="r")["v"].shape == (8, 3, 4)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_packed_coordinates_are_cut_on_the_degrees_xarray_shows(
    tmp_path: Path, zarr_format: int
) -> None:
    """Latitude and longitude stored as int16 tenths of a degree (`scale_factor` 0.1): the
    box is cut on the degrees xarray shows, never on the stored integers (on which
    `area=(60, -30, 20, 40)` would keep no latitude at all, or the wrong ones)."""
    path = tmp_path / "packed.zarr"
    ds = grid_dataset(descending=True, signed=False)
    packed = {"dtype": "int16", "scale_factor": 0.1, "_FillValue": -32767}
    ds.to_zarr(
        str(path),
        mode="w",
        zarr_format=zarr_format,
        encoding={"latitude": packed, "longitude": packed},
        consolidated=False,
    )
    shown = xr.open_zarr(str(path), consolidated=False)
    assert zarr.open_group(str(path), mode="r")["latitude"].dtype == np.int16
    box = BOXES["across 0/360"]
    got, loader = _epoch(str(path), variables=["t2m"], area=box)
    want = xarray_area(shown, *box)
    steps = got[SAMPLE_INDEX_KEY]
    np.testing.assert_array_equal(got["t2m"], want["t2m"].values[steps])
    np.testing.assert_allclose(loader.area.latitudes, want.latitude.values, atol=1e-9)
    np.testing.assert_allclose(loader.area.longitudes, want.longitude.values, atol=1e-9)


def test_stacked_and_normalised_channels_keep_the_box(stores: dict[str, str]) -> None:
    """Stacked with levels and normalised by per-channel statistics of the whole grid:
    each channel is xarray's box, normalised."""
    url = stores["v2 descending [0, 360)"]
    box = BOXES["across 0/360"]
    stats = ib.compute_stats(url, ["t2m", "z"], split="all", levels=[500, 850])
    got, _ = _epoch(
        url, variables=["t2m", "z"], levels=[500, 850], area=box, stack=True, normalise=stats
    )
    want = xarray_area(xr.open_zarr(url, consolidated=False), *box)
    steps = got[SAMPLE_INDEX_KEY]
    assert got["fields"].shape == (12, 3, 5, 8)
    t2m = (want.t2m.values[steps] - stats.mean["t2m"][0]) / stats.std["t2m"][0]
    np.testing.assert_allclose(got["fields"][:, 0], t2m, rtol=1e-5, atol=1e-5)
    z850 = want.z.sel(level=850).values[steps]
    np.testing.assert_allclose(
        got["fields"][:, 2], (z850 - stats.mean["z"][1]) / stats.std["z"][1], rtol=1e-5, atol=1e-5
    )


def test_a_dataset_takes_an_area_and_refuses_two_regions(stores: dict[str, str]) -> None:
    """A Dataset of the whole grid with area= reads the box; a Dataset that already selects
    part of the grid (a region) and area= too is refused, not cropped twice."""
    url = stores["v3 descending [-180, 180)"]
    box = BOXES["across the dateline"]
    ds = xr.open_zarr(url, consolidated=False)
    got, _ = _epoch(ds[["t2m"]], area=box)
    want = xarray_area(ds, *box)
    np.testing.assert_array_equal(got["t2m"], want.t2m.values[got[SAMPLE_INDEX_KEY]])
    with pytest.raises(ValueError, match=r"selects part of the grid and area= is given too"):
        ib.build_loader(ds[["t2m"]].isel(latitude=slice(0, 5)), device="cpu", area=box)


def test_a_fine_grids_area_keeps_the_state_small(tmp_path: Path) -> None:
    """A box of 180 x 360 points on a quarter-degree grid: the state records its picks by
    count and digest, not position by position (1.2 KB of state, not 3.9), and
    still refuses a box one column wider."""
    lat = np.arange(90.0, -90.1, -0.25)
    lon = np.arange(0.0, 360.0, 0.25)
    ds = xr.Dataset(
        {"t2m": (("time", "latitude", "longitude"), np.zeros((8, lat.size, lon.size), "f4"))},
        coords={"time": np.arange(8), "latitude": lat, "longitude": lon},
    )
    path = str(tmp_path / "fine.zarr")
    ds.to_zarr(path, encoding={"t2m": {"chunks": (4, 361, 720)}}, consolidated=False)
    box = (60, -30, 15.25, 59.75)
    loader = ib.build_loader(path, ["t2m"], batch_size=2, device="cpu", area=box)
    assert next(iter(loader))["t2m"].shape == (2, 180, 360)
    state = loader.state_dict()
    assert len(json.dumps(state)) < 2_000  # 3,900 listing the 540 positions
    wider = ib.build_loader(path, ["t2m"], batch_size=2, device="cpu", area=(60, -30, 15.25, 60))
    with pytest.raises(ValueError, match=r"kept positions .* were \[\[1, 180, '[0-9a-f]+'\]"):
        wider.load_state_dict(state)
        next(iter(wider))


def test_statistics_of_the_box(stores: dict[str, str], tmp_path: Path) -> None:
    """`compute_stats(area=...)` and `insitubatch stats --area`: per-channel mean and std of
    xarray's box, NaN skipped."""
    url = stores["v2 ascending [-180, 180)"]
    box = BOXES["across the dateline"]
    stats = ib.compute_stats(url, ["t2m", "z"], split="all", levels=[850], area=box)
    want = xarray_area(xr.open_zarr(url, consolidated=False), *box)
    np.testing.assert_allclose(stats.mean["t2m"], [float(want.t2m.mean())], rtol=1e-6)
    np.testing.assert_allclose(stats.std["t2m"], [float(want.t2m.std())], rtol=1e-5)
    np.testing.assert_allclose(stats.mean["z"], [float(want.z.sel(level=850).mean())], rtol=1e-6)
    out = tmp_path / "box.stats.json"
    text = ",".join(str(v) for v in box)
    assert (
        main(
            [
                "stats",
                url,
                "--variables",
                "t2m",
                "--split",
                "all",
                "--area",
                text,
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert ib.ChannelStats.load(out).mean["t2m"] == pytest.approx(stats.mean["t2m"])


@pytest.mark.parametrize("stack", [False, True])
@pytest.mark.parametrize("kind", ["v2 descending [0, 360)", "v3 descending [-180, 180)"])
def test_static_fields_are_cropped_as_the_fields_are(
    stores: dict[str, str], kind: str, stack: bool
) -> None:
    """A static field (no time) beside the fields: every batch holds xarray's box of it,
    in the fields' order (across the seam too), unstacked or stacked as a channel; with
    patches, each sample's crop of the box."""
    url = stores[kind]
    box = BOXES["across 0/360"]
    want = xarray_area(xr.open_zarr(url, consolidated=False), *box)
    got, loader = _epoch(url, variables=["t2m", "land_sea_mask"], area=box, stack=stack)
    if stack:
        assert loader.channels == {"fields": ["t2m", "land_sea_mask"]}
        t2m, mask = got["fields"][:, 0], got["fields"][:, 1]
    else:
        t2m, mask = got["t2m"], got["land_sea_mask"]
    np.testing.assert_array_equal(t2m, want.t2m.values[got[SAMPLE_INDEX_KEY]])
    np.testing.assert_array_equal(mask, np.broadcast_to(want.land_sea_mask.values, mask.shape))
    got, _ = _epoch(
        url, variables=["t2m", "land_sea_mask"], area=box, stack=stack, patches=ib.PatchSpec((2, 3))
    )
    origins = got[PATCH_ORIGIN_KEY]
    mask = got["fields"][:, 1] if stack else got["land_sea_mask"]
    crops = [want.land_sea_mask.values[o0 : o0 + 2, o1 : o1 + 3] for o0, o1 in origins]
    np.testing.assert_array_equal(mask, np.stack(crops))
