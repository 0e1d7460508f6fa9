"""Static fields (issue 34, part 1) and the channel list (part 4): a variable with no time
dimension (a land-sea mask, the surface geopotential) is read once, decoded as
`xr.open_zarr(path)[name]` shows it, and appears in every batch as `(batch, *grid)`:
unstacked, stacked as its group's last channel (repeated over a window's steps), cropped
at each sample's patch. Stores written by `Dataset.to_zarr` (v2 and v3), xarray the
reference, NaN == NaN. Also: a static on another grid refused, the budget counting it (as
`insitubatch inspect` reports it), resume (mid-epoch and elastic) and the fingerprint."""

from __future__ import annotations

import inspect
import json
import logging
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np
import pytest
import torch
import zarr

import insitubatch_nodes as ib
from insitubatch_nodes.builder.loader_plan import plan_loader
from insitubatch_nodes.builder.loader_settings import check_settings
from insitubatch_nodes.cli.store_report import inspect_store
from insitubatch_nodes.core.batch_fields import PATCH_ORIGIN_KEY, SAMPLE_INDEX_KEY
from insitubatch_nodes.loader.rank_states import RANK_STATES_KEY
from tests.helpers.batches import as_numpy, torch_roundtrip
from tests.helpers.resume_check import check_every_cut
from tests.helpers.time_stores import hourly

xr = pytest.importorskip("xarray")

STEPS, LATS, LONS = 24, 6, 8
LEVELS = [1000.0, 850.0, 500.0]  # stored descending, as the CDS's ERA5
PACKED = {"dtype": "int16", "scale_factor": 0.5, "add_offset": 100.0, "_FillValue": -32767}


# xarray's notes on v3 and consolidated metadata
pytestmark = pytest.mark.filterwarnings("ignore")


def _write(path: Path, zarr_format: int = 3, **extra: Any) -> str:
    """ERA5-shaped: `t2m` (time, lat, lon), `t` (time, level, lat, lon), `lsm` (lat, lon)
    in [0, 1] with a NaN, `z` (lat, lon) packed int16 with a fill value (its NaN stored
    as -32767), chunked unlike the fields."""
    rng = np.random.default_rng(7)
    lsm = rng.uniform(0.0, 1.0, (LATS, LONS))
    lsm[0, 0] = np.nan
    z = np.round(rng.uniform(0.0, 5000.0, (LATS, LONS)))
    z[1, 2] = np.nan
    data = {
        "t2m": (("time", "lat", "lon"), rng.normal(280, 5, (STEPS, LATS, LONS)).astype("f4")),
        "t": (
            ("time", "level", "lat", "lon"),
            rng.normal(250, 5, (STEPS, len(LEVELS), LATS, LONS)).astype("f4"),
        ),
        "lsm": (("lat", "lon"), lsm),
        "z": (("lat", "lon"), z),
        **extra,
    }
    ds = xr.Dataset(
        data,
        coords={
            "time": hourly("2015-01-01", STEPS),
            "level": LEVELS,
            "lat": np.linspace(90.0, -90.0, LATS),
            "lon": np.arange(LONS) * 45.0,
        },
    )
    encoding = {
        "t2m": {"chunks": (4, LATS, LONS)},
        "t": {"chunks": (4, 1, LATS, LONS)},
        "lsm": {"chunks": (4, 3)},
        "z": {**PACKED, "chunks": (LATS, 5)},
    }
    ds.to_zarr(str(path), mode="w", zarr_format=zarr_format, encoding=encoding, consolidated=False)
    return str(path)


def _shown(url: str, name: str, **open_settings: Any) -> np.ndarray:
    return xr.open_zarr(url, consolidated=False, **open_settings)[name].values


def _loader(url: str, variables: list[str] | None = None, **settings: Any) -> Any:
    defaults = {"split": "all", "batch_size": 5, "device": "cpu", "block_chunks": 2}
    return ib.build_loader(url, variables, **{**defaults, **settings})


def _same(got: Any, expected: np.ndarray) -> None:
    got = as_numpy(got)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert np.array_equal(got, expected, equal_nan=True)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_every_sample_holds_the_statics_xarray_shows(tmp_path: Path, zarr_format: int) -> None:
    url = _write(tmp_path / "s.zarr", zarr_format)
    lsm, z, t2m = _shown(url, "lsm"), _shown(url, "z"), _shown(url, "t2m")
    assert z.dtype == np.float64 and np.isnan(z[1, 2])  # packed: unpacked and masked
    seen = set()
    for batch in _loader(url, ["t2m", "lsm", "z"]):
        steps = as_numpy(batch[SAMPLE_INDEX_KEY])
        seen.update(steps.tolist())
        _same(batch["t2m"], t2m[steps])
        _same(batch["lsm"], np.broadcast_to(lsm, (steps.size, *lsm.shape)))
        _same(batch["z"], np.broadcast_to(z, (steps.size, *z.shape)))
        assert batch["lsm"].stride()[0] == 0  # one array, broadcast: no copy per sample
    assert seen == set(range(STEPS))


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_statics_are_stored_values_without_decoding_and_cast_with_dtype(
    tmp_path: Path, zarr_format: int
) -> None:
    url = _write(tmp_path / "s.zarr", zarr_format)
    stored = _shown(url, "z", mask_and_scale=False)
    assert stored.dtype == np.int16
    batch = next(iter(_loader(url, ["t2m", "z"], decode_cf=False)))
    _same(batch["z"][0], stored)
    batch = next(iter(_loader(url, ["t2m", "z"], dtype="float32")))
    _same(batch["z"][0], _shown(url, "z").astype("float32"))
    batch = next(iter(_loader(url, ["t2m", "z"], dtype=torch.bfloat16)))
    assert batch["z"].dtype == torch.bfloat16
    expected = torch.from_numpy(_shown(url, "z")).to(torch.bfloat16)
    assert torch.equal(batch["z"][0].isnan(), expected.isnan())
    assert torch.equal(batch["z"][0].nan_to_num(), expected.nan_to_num())


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_stacked_statics_are_the_last_channels_and_loader_channels_names_them(
    tmp_path: Path, zarr_format: int
) -> None:
    url = _write(tmp_path / "s.zarr", zarr_format)
    loader = _loader(url, ["t2m", "t", "lsm", "z"], stack=True, levels=[500, 850])
    assert loader.channels == {"fields": ["t2m", "t_500", "t_850", "lsm", "z"]}
    t = xr.open_zarr(url, consolidated=False)["t"].sel(level=[500, 850]).values
    expected_fields = [_shown(url, "t2m")[:, None], t]
    for batch in loader:
        steps = as_numpy(batch[SAMPLE_INDEX_KEY])
        stacked = as_numpy(batch["fields"])
        assert stacked.shape == (steps.size, 5, LATS, LONS)
        _same(stacked[:, :3], np.concatenate([f[steps] for f in expected_fields], 1).astype("f8"))
        for channel, name in [(3, "lsm"), (4, "z")]:
            _same(stacked[:, channel], np.broadcast_to(_shown(url, name), (steps.size, LATS, LONS)))
    assert _loader(url, ["t2m", "lsm"]).channels is None  # unstacked: the keys name them
    spec = ib.SampleSpec({"inputs": ib.window(["t2m"], steps=2)})
    loose = _loader(url, ["t2m", "lsm"], spec=spec, stack=True)  # lsm in no group
    assert loose.channels == {"inputs": ["t2m"]}
    batch = next(iter(loose))
    _same(batch["lsm"], np.broadcast_to(_shown(url, "lsm"), (5, LATS, LONS)))


def test_with_a_window_a_static_has_no_steps_axis_and_is_stacked_at_every_step(
    tmp_path: Path,
) -> None:
    url = _write(tmp_path / "s.zarr")
    spec = ib.SampleSpec(
        {"inputs": ib.window(["t2m", "lsm"], steps=3), "targets": ib.leads(["t2m"], [1])}
    )
    lsm, t2m = _shown(url, "lsm"), _shown(url, "t2m")
    batch = next(iter(_loader(url, spec=spec)))
    anchors = as_numpy(batch[SAMPLE_INDEX_KEY])
    assert set(batch) == {SAMPLE_INDEX_KEY, "inputs/t2m", "targets/t2m", "inputs/lsm"}
    _same(batch["inputs/lsm"], np.broadcast_to(lsm, (anchors.size, LATS, LONS)))
    stacked_loader = _loader(url, spec=spec, stack=True)
    assert stacked_loader.channels == {"inputs": ["t2m", "lsm"], "targets": ["t2m"]}
    for batch in stacked_loader:
        anchors = as_numpy(batch[SAMPLE_INDEX_KEY])
        inputs = as_numpy(batch["inputs"])
        assert inputs.shape == (anchors.size, 3, 2, LATS, LONS)
        window = anchors[:, None] + np.arange(-2, 1)[None, :]
        _same(inputs[:, :, 0], t2m[window].astype("f8"))
        _same(inputs[:, :, 1], np.broadcast_to(lsm, (anchors.size, 3, LATS, LONS)))
        assert as_numpy(batch["targets"]).shape == (anchors.size, 1, 1, LATS, LONS)


@pytest.mark.parametrize("stack", [False, True])
def test_statics_are_cropped_at_each_samples_patch(tmp_path: Path, stack: bool) -> None:
    url = _write(tmp_path / "s.zarr")
    lsm = _shown(url, "lsm")
    loader = _loader(url, ["t2m", "lsm"], patches=ib.PatchSpec((3, 5)), stack=stack, seed=4)
    origins_seen = set()
    for batch in loader:
        origins = as_numpy(batch[PATCH_ORIGIN_KEY])
        got = as_numpy(batch["fields"])[:, 1] if stack else as_numpy(batch["lsm"])
        expected = np.stack([lsm[a : a + 3, b : b + 5] for a, b in origins])
        _same(got, expected.astype(got.dtype))
        origins_seen.update(map(tuple, origins.tolist()))
    assert len(origins_seen) > 1  # crops at several places, each its own


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("stack", [False, True])
def test_on_cuda_statics_are_what_xarray_shows(tmp_path: Path, stack: bool) -> None:
    url = _write(tmp_path / "s.zarr")
    lsm = _shown(url, "lsm")
    loader = _loader(url, ["t2m", "lsm"], device="cuda", stack=stack)
    for batch in loader:
        count = batch[SAMPLE_INDEX_KEY].shape[0]
        got = batch["fields"][:, 1] if stack else batch["lsm"]
        assert got.device.type == "cuda"
        _same(got.cpu(), np.broadcast_to(lsm, (count, LATS, LONS)))


def test_the_dataset_route_takes_a_static_and_crops_it_with_the_region(tmp_path: Path) -> None:
    url = _write(tmp_path / "s.zarr")
    ds = xr.open_zarr(url, consolidated=False)
    region = ds[["t2m", "lsm"]].isel(lat=slice(1, 4), time=slice(0, 12))
    loader = ib.build_loader(region, split="x", batch_size=4, device="cpu")
    seen = set()
    for batch in loader:
        steps = as_numpy(batch[SAMPLE_INDEX_KEY])
        seen.update(steps.tolist())
        _same(batch["lsm"], np.broadcast_to(region["lsm"].values, (steps.size, 3, LONS)))
        _same(batch["t2m"], ds["t2m"].values[steps, 1:4])
    assert seen == set(range(12))


@pytest.mark.parametrize("stack", [False, True])
def test_a_region_crop_cuts_a_static_once_not_per_sample(tmp_path: Path, stack: bool) -> None:
    # every sample has the same crop (the Dataset route's region, or mode="region"): one
    # cut of the static, broadcast, and no per-sample copy charged to the budget
    url = _write(tmp_path / "s.zarr")
    lsm = _shown(url, "lsm")
    region = ib.PatchSpec((3, 5), mode="region", origin=(2, 1))
    plan = _plan(url, ["t2m", "lsm"], patches=region, stack=stack)
    assert plan.statics.cost.sample_bytes == (3 * 5 * 8 if stack else 0)  # stacked: its copy
    for batch in _loader(url, ["t2m", "lsm"], patches=region, stack=stack):
        count = int(batch[SAMPLE_INDEX_KEY].shape[0])
        got = batch["fields"][:, 1] if stack else batch["lsm"]
        _same(got, np.broadcast_to(lsm[2:5, 1:6], (count, 3, 5)).astype(as_numpy(got).dtype))
        if not stack:
            assert got.stride()[0] == 0  # a broadcast view of the one cut


def test_a_static_on_another_grid_is_refused_naming_the_difference(tmp_path: Path) -> None:
    coarse = (("lat2", "lon2"), np.zeros((3, 4)))
    url = _write(tmp_path / "s.zarr", coarse=coarse)
    with pytest.raises(
        ValueError,
        match=r"static field 'coarse' has dimensions \('lat2', 'lon2'\), and the grid of 't2m' "
        r"is \('lat', 'lon'\).*regrid it\), or leave it out of variables=",
    ):
        _loader(url, ["t2m", "coarse"])
    with pytest.raises(ValueError, match=r"static field 'coarse' has dimensions"):
        ib.build_loader(xr.open_zarr(url, consolidated=False)[["t2m", "coarse"]])


def test_a_static_of_another_size_on_the_same_dimension_names_is_refused(
    tmp_path: Path,
) -> None:
    root = zarr.open_group(_write(tmp_path / "s.zarr", zarr_format=3), mode="a")
    root.create_array(
        "half", shape=(LATS // 2, LONS), chunks=(3, 4), dtype="f4", dimension_names=["lat", "lon"]
    )[...] = 1
    with pytest.raises(
        ValueError,
        match=r"static field 'half' has shape \(3, 8\) on \('lat', 'lon'\), and 't2m''s grid is "
        r"\(6, 8\): another grid",
    ):
        _loader(str(tmp_path / "s.zarr"), ["t2m", "half"])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_static_with_the_grid_axes_swapped_is_refused_even_on_a_square_grid(
    tmp_path: Path, zarr_format: int
) -> None:
    square = np.arange(LONS * LONS, dtype="f4").reshape(LONS, LONS)
    ds = xr.Dataset(
        {
            "t2m": (("time", "lat", "lon"), np.zeros((STEPS, LONS, LONS), "f4")),
            "swapped": (("lon", "lat"), square),  # same sizes: only the names tell
        },
        coords={"time": hourly("2015-01-01", STEPS)},
    )
    url = str(tmp_path / "s.zarr")
    ds.to_zarr(url, zarr_format=zarr_format, consolidated=False)
    with pytest.raises(
        ValueError,
        match=r"static field 'swapped' has dimensions \('lon', 'lat'\), and the grid of 't2m' "
        r"is \('lat', 'lon'\)",
    ):
        _loader(url, ["t2m", "swapped"])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_static_beside_a_field_that_names_no_dimensions_is_refused(
    tmp_path: Path, zarr_format: int
) -> None:
    # the static names (lon, lat), the field none: on a square grid only the names could
    # tell that the static's axes are swapped, so it cannot be given cell for cell
    square = np.arange(LONS * LONS, dtype="f4").reshape(LONS, LONS)
    ds = xr.Dataset({"swapped": (("lon", "lat"), square)}, {"time": hourly("2015-01-01", 4)})
    url = str(tmp_path / "s.zarr")
    ds.to_zarr(url, zarr_format=zarr_format, consolidated=False)
    root = zarr.open_group(url, mode="a")
    root.create_array("plain", shape=(4, LONS, LONS), chunks=(2, LONS, LONS), dtype="f4")[...] = 1
    with pytest.raises(
        ValueError,
        match=r"static field 'swapped' names its dimensions \('lon', 'lat'\) and 'plain' "
        r"names none.*or leave 'swapped' out of variables=",
    ):
        _loader(url, ["plain", "swapped"])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_a_static_named_like_the_sample_indices_is_refused(
    tmp_path: Path, zarr_format: int
) -> None:
    # batches keep the sample indices under that key: the static would replace them
    url = _write(tmp_path / "s.zarr", zarr_format, sample_index=(("lat", "lon"), np.ones((6, 8))))
    with pytest.raises(ValueError, match=r"a variable is named 'sample_index'"):
        _loader(url, ["t2m", "sample_index"])


def test_statics_alone_or_a_spec_group_of_statics_only_are_refused(tmp_path: Path) -> None:
    url = _write(tmp_path / "s.zarr")
    with pytest.raises(ValueError, match=r"\['lsm', 'z'\] are all static fields"):
        _loader(url, ["lsm", "z"])
    spec = ib.SampleSpec({"inputs": ib.window(["t2m"], 2), "consts": ib.window(["lsm"], 1)})
    with pytest.raises(ValueError, match=r"sample spec group 'consts' names only static fields"):
        _loader(url, spec=spec)


def test_the_default_choice_leaves_statics_out_and_says_how_to_take_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = _write(tmp_path / "s.zarr")
    with caplog.at_level(logging.INFO, logger="insitubatch_nodes.builder"):
        loader = _loader(url)
    assert set(next(iter(loader))) == {SAMPLE_INDEX_KEY, "t", "t2m"}
    assert "static fields ['lsm', 'z'] (no time dimension) left out" in caplog.text
    assert "name them in variables=" in caplog.text


def _plan(url: str, variables: list[str], **settings: Any) -> Any:
    """What `build_loader(url, variables, ...)` plans (no node made)."""
    given = {"split": "all", "batch_size": 5, "device": "cpu", "block_chunks": 2, **settings}
    bound = inspect.signature(ib.build_loader).bind(url, variables, **given)
    bound.apply_defaults()
    arguments = dict(bound.arguments)
    del arguments["host"]
    return plan_loader(check_settings(arguments))


def test_the_budget_counts_the_statics_and_inspect_reports_the_same(tmp_path: Path) -> None:
    url = _write(tmp_path / "s.zarr")
    plain = _plan(url, ["t2m"], memory_budget=1 << 26).choices.plan
    with_statics = _plan(url, ["t2m", "lsm", "z"], memory_budget=1 << 26).choices.plan
    resident = 2 * LATS * LONS * 8  # two float64 grids, once
    assert with_statics.static_bytes == resident
    assert with_statics.batch_bytes == plain.batch_bytes  # broadcast views: no copies
    assert with_statics.read_ahead_bytes == plain.read_ahead_bytes - resident
    stacked = _plan(url, ["t2m", "lsm", "z"], memory_budget=1 << 26, stack=True).choices.plan
    copies = 5 * 2 * LATS * LONS * 8  # a batch's stacked copies of both
    assert stacked.batch_bytes == plain.batch_bytes + copies
    # a budget the fields alone fit in exactly is refused once the statics count
    fixed = {"shuffle": "block", "max_inflight": 1}
    parts = _plan(url, ["t2m"], memory_budget=1 << 26, **fixed).choices.plan
    least = parts.window_bytes + parts.batch_bytes + parts.inflight_bytes + parts.block_bytes
    assert _plan(url, ["t2m"], memory_budget=least, **fixed).choices.plan.read_ahead_bytes == (
        parts.block_bytes
    )
    with pytest.raises(ValueError, match=rf"the static fields {resident}, and one block"):
        _plan(url, ["t2m", "lsm", "z"], memory_budget=least, **fixed)
    report = inspect_store(url, ["t2m", "lsm", "z"], memory_budget=1 << 26, device="cpu")
    assert report.loader.plan is not None
    assert report.loader.plan.static_bytes == resident
    stacked_report = inspect_store(
        url, ["t2m", "lsm", "z"], memory_budget=1 << 26, device="cpu", stack=True
    )
    assert stacked_report.loader.channels == {"fields": ["t2m", "lsm", "z"]}


def test_a_bfloat16_copy_of_a_static_kept_on_the_cpu_counts_in_the_budget(
    tmp_path: Path,
) -> None:
    # numpy cannot hold bfloat16: on device="cpu" the node keeps torch's cast copy beside
    # the decoded array, both on the host
    url = _write(tmp_path / "s.zarr")
    decoded = LATS * LONS * 8  # float64, as xarray decodes it
    plan = _plan(url, ["t2m", "lsm"], dtype=torch.bfloat16)
    assert plan.statics.cost.resident_bytes == decoded + LATS * LONS * 2
    stacked = _plan(url, ["t2m", "lsm"], dtype=torch.bfloat16, stack=True)
    assert stacked.statics.cost.resident_bytes == decoded  # cast with the stacked tensor
    loader = _loader(url, ["t2m", "lsm"], dtype=torch.bfloat16)
    assert next(iter(loader))["lsm"].dtype == torch.bfloat16


def test_normalise_covers_statics_and_a_constant_one_stays_finite(tmp_path: Path) -> None:
    url = _write(tmp_path / "s.zarr", ones=(("lat", "lon"), np.ones((LATS, LONS))))
    stats = ib.compute_stats(url, ["t2m", "lsm", "ones"], split="all")
    lsm = _shown(url, "lsm")
    assert stats.mean["lsm"] == pytest.approx([np.nanmean(lsm)])
    assert stats.std["lsm"] == pytest.approx([np.nanstd(lsm)])
    assert stats.mean["ones"] == [1.0] and stats.std["ones"] == [0.0]
    for stack in (False, True):
        batch = next(iter(_loader(url, ["t2m", "lsm", "ones"], normalise=stats, stack=stack)))
        ones = as_numpy(batch["fields"])[:, 2] if stack else as_numpy(batch["ones"])
        assert np.array_equal(ones, np.zeros_like(ones))  # (1 - 1) / 1: divided by 1, not 0
        normalised = as_numpy(batch["fields"])[:, 1] if stack else as_numpy(batch["lsm"])
        expected = (lsm - stats.mean["lsm"][0]) / stats.std["lsm"][0]
        assert np.allclose(normalised[0], expected, equal_nan=True, atol=1e-6)


@pytest.mark.parametrize("stack", [False, True])
def test_resume_mid_epoch_is_exact_with_statics(tmp_path: Path, stack: bool) -> None:
    url = _write(tmp_path / "s.zarr")
    check_every_cut(
        lambda: _loader(url, ["t2m", "lsm", "z"], split="train", seed=3, stack=stack).root
    )


def test_elastic_resume_with_statics_sees_every_sample_once(tmp_path: Path) -> None:
    url = _write(tmp_path / "s.zarr")
    lsm = _shown(url, "lsm")

    def group(world: int) -> list[Any]:
        return [
            _loader(url, ["t2m", "lsm"], batch_size=2, block_chunks=1, rank=r, world_size=world)
            for r in range(world)
        ]

    before = group(2)
    iterators = [iter(loader) for loader in before]
    seen = [int(i) for it in iterators for i in next(it)[SAMPLE_INDEX_KEY]]
    state = torch_roundtrip(
        json.loads(json.dumps({RANK_STATES_KEY: [loader.state_dict() for loader in before]}))
    )
    for loader in before:
        loader.close()
    after = group(3)
    for loader in after:
        loader.load_state_dict(state)
        for batch in loader:
            seen += as_numpy(batch[SAMPLE_INDEX_KEY]).tolist()
            _same(batch["lsm"], np.broadcast_to(lsm, (batch["lsm"].shape[0], LATS, LONS)))
        loader.close()
    assert set(seen) == set(range(STEPS))  # every sample; repeats only as padding
    assert len(seen) - STEPS < 3 * 2


def test_a_state_saved_with_other_statics_is_refused_by_name(tmp_path: Path) -> None:
    url = _write(tmp_path / "s.zarr")
    without = _loader(url, ["t2m"], split="train")
    next(iter(without))
    state = torch_roundtrip(without.state_dict())
    with_statics = _loader(url, ["t2m", "lsm"], split="train")
    with pytest.raises(
        ValueError, match=r"the state was saved on static fields \[\], this loader reads \['lsm'\]"
    ):
        with_statics.load_state_dict(state)
        next(iter(with_statics))
    other = _loader(url, ["t2m", "lsm"], split="train")
    next(iter(other))
    saved = torch_roundtrip(other.state_dict())
    cast = _loader(url, ["t2m", "lsm"], split="train", dtype="float32")
    with pytest.raises(ValueError, match=r"array 'lsm' was .* when the state was saved"):
        cast.load_state_dict(saved)
        next(iter(cast))
    same = _loader(url, ["t2m", "lsm"], split="train")
    same.load_state_dict(saved)
    next(iter(same))


def test_a_static_chunk_cut_short_is_refused_as_every_chunk_is(tmp_path: Path) -> None:
    url = _write(tmp_path / "s.zarr", zarr_format=3)
    chunk = tmp_path / "s.zarr" / "lsm" / "c" / "1" / "2"
    chunk.write_bytes(bytes(numcodecs.Zstd().encode(np.zeros(1))))  # of its 4 x 3 values
    with pytest.raises(
        ib.CorruptChunkError, match=r"chunk \(1, 2\) of variable 'lsm' \(key 'lsm/c/1/2'\)"
    ):
        _loader(url, ["t2m", "lsm"])
