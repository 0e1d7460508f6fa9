"""Pressure levels picked by value on real stores (xarray's `to_zarr`, v2 and v3, levels
stored ascending and descending, and zarr-python's): the batches hold exactly
`ds.sel(level=[...])`, in the order asked for (a level asked twice comes twice), only the
level chunks that hold a picked level are read, channels and statistics are per level
(`z_500`) in that order, and what cannot be picked is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import insitubatch_nodes as ib
from insitubatch_nodes.core.batch_fields import PATCH_ORIGIN_KEY, SAMPLE_INDEX_KEY
from insitubatch_nodes.nodes.stack_channels import StackChannelsNode
from tests.helpers.batches import as_numpy
from tests.helpers.graphs import build_stage
from tests.helpers.profiles import examples
from tests.helpers.resume_check import check_every_cut
from tests.helpers.stores import write_store
from tests.helpers.time_stores import LEVELS, hourly, write_native, write_xarray

TIMES = hourly("2016-01-01T00", 24, hours=6)


# xarray's and zarr's notes on v2, v3 and consolidated metadata
pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("levels")
    return {
        "xarray-v2": write_xarray(root / "x2.zarr", TIMES, zarr_format=2),
        "xarray-v3": write_xarray(root / "x3.zarr", TIMES, zarr_format=3),
        "native-v3": write_native(root / "n3.zarr", TIMES),
        "descending-v2": write_xarray(root / "d2.zarr", TIMES, zarr_format=2, descending=True),
        "descending-v3": write_xarray(root / "d3.zarr", TIMES, zarr_format=3, descending=True),
    }


# requests in every order: a store's own, the other, neither, and a level twice
REQUESTS = {
    "ascending": [250, 850],
    "descending": [850, 250],
    "unordered": [850, 50, 500],
    "twice": [500, 1000, 500],
}


def _in_order(url: str, **settings: Any) -> tuple[np.ndarray, dict[str, np.ndarray], Any]:
    loader = ib.build_loader(
        url, split="all", batch_size=5, evaluation=True, device="cpu", **settings
    )
    batches = list(loader)
    steps = np.concatenate([b["sample_index"].numpy() for b in batches])
    keys = [k for k in batches[0] if k != "sample_index"]
    return steps, {k: np.concatenate([as_numpy(b[k]) for b in batches]) for k in keys}, loader


@pytest.mark.parametrize("request_", list(REQUESTS))
@pytest.mark.parametrize(
    "kind", ["xarray-v2", "xarray-v3", "native-v3", "descending-v2", "descending-v3"]
)
def test_levels_picked_by_value_are_what_ds_sel_picks(
    stores: dict[str, str], kind: str, request_: str
) -> None:
    url = stores[kind]
    levels = REQUESTS[request_]
    steps, values, _ = _in_order(url, variables=["t2m", "z"], levels=levels)
    ds = xr.open_zarr(url, consolidated=False)
    np.testing.assert_array_equal(values["z"], ds.z.sel(level=levels).values[steps])
    np.testing.assert_array_equal(values["t2m"], ds.t2m.values[steps])  # no level axis


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.sampled_from(["xarray-v3", "descending-v3"]),
    st.lists(st.sampled_from(LEVELS), min_size=1, max_size=6),
)
def test_any_levels_hold_ds_sel_and_read_only_their_chunks(
    stores: dict[str, str], kind: str, chosen: list[int]
) -> None:
    """Any levels in any order, some twice, on a store keeping them either way: what
    `ds.sel` gives, reading the level chunks that hold one (each once per time chunk)."""
    url = stores[kind]
    steps, values, loader = _in_order(url, variables=["z"], levels={"z": chosen})
    ds = xr.open_zarr(url, consolidated=False)
    np.testing.assert_array_equal(values["z"], ds.z.sel(level=chosen).values[steps])
    # levels are chunked by 2: a level chunk is read only when it holds a picked level
    stored = [int(v) for v in ds.level.values]
    level_chunks = {stored.index(v) // 2 for v in chosen}
    time_chunks = -(-TIMES.size // 4)
    assert loader.stats()["chunks_read"] == time_chunks * len(level_chunks)


SPEC = ib.SampleSpec(
    {"inputs": ib.window(["t2m", "z"], steps=2, stride=2), "targets": ib.leads(["z"], [1])}
)
SHAPES = {
    "plain": (None, None),
    "windows": (SPEC, None),
    "patches": (None, ib.PatchSpec((2, 3))),
    "windowed patches": (SPEC, ib.PatchSpec((2, 3))),
}


def _expected_values(
    ds: xr.Dataset, variable: str, levels: list[int], batch: dict[str, np.ndarray], offsets: Any
) -> np.ndarray:
    """What xarray holds for one batch array: `ds.sel(level=levels)` at each sample's steps
    (its anchor plus `offsets`, none for a spec-less batch), cropped at its patch origin."""
    values = ds[variable].sel(level=levels) if "level" in ds[variable].dims else ds[variable]
    stored = values.values
    anchors = batch[SAMPLE_INDEX_KEY]
    taken = stored[anchors] if offsets is None else stored[anchors[:, None] + np.array(offsets)]
    if PATCH_ORIGIN_KEY not in batch:
        return taken
    crops = [
        sample[..., o0 : o0 + 2, o1 : o1 + 3]
        for sample, (o0, o1) in zip(taken, batch[PATCH_ORIGIN_KEY], strict=True)
    ]
    return np.stack(crops)


def _numpy(batch: Any) -> dict[str, np.ndarray]:
    return {k: as_numpy(v) for k, v in batch.items()}


@pytest.mark.parametrize("gather", ["host", "device"])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("kind", ["xarray-v2", "descending-v3"])
def test_windows_patches_and_both_gathers_hold_ds_sel_in_the_asked_order(
    stores: dict[str, str], kind: str, shape: str, gather: str
) -> None:
    """With windows and leads, random patches or both, on the host gather and on the
    device gather (blocks decoded to tensors, here CPU ones): each batch array is
    `ds.sel(level=[850, 50, 500, 850])` at its samples' steps and crops."""
    url = stores[kind]
    levels = [850, 50, 500, 850]
    spec, patches = SHAPES[shape]
    on = {"decode_on": torch.device("cpu")} if gather == "device" else {}
    node = build_stage(url, "gather", spec=spec, patches=patches, levels=levels, **on)
    ds = xr.open_zarr(url, consolidated=False)
    fields = (
        [(v, v, None) for v in ("t2m", "z")]
        if spec is None
        else [(key, variable, offsets) for key, _, variable, offsets in spec.fields()]
    )
    count = 0
    for batch in ib.Loader(node):
        if gather == "device":
            assert isinstance(batch[fields[-1][0]], torch.Tensor)
        got = _numpy(batch)
        for key, variable, offsets in fields:
            want = _expected_values(ds, variable, levels, got, offsets)
            np.testing.assert_array_equal(got[key], want, err_msg=key)
        count += 1
    assert count >= 3


@pytest.mark.parametrize("gather", ["host", "device"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_stacked_channels_are_named_as_they_lie(
    stores: dict[str, str], shape: str, gather: str
) -> None:
    """Stacked, each channel holds what its name in `batch_channels` says, `z_500` being
    `ds.z.sel(level=500)`: the names follow the asked order as the tensor does."""
    url = stores["descending-v2"]
    levels = [500, 1000, 250]
    spec, patches = SHAPES[shape]
    on = {"decode_on": torch.device("cpu")} if gather == "device" else {}
    layouts = ib.ZarrSource.open(url, levels=levels).layouts
    names = ib.batch_channels(layouts, spec, stacked=True)
    node = StackChannelsNode(
        build_stage(url, "gather", spec=spec, patches=patches, levels=levels, **on),
        layouts,
        spec,
    )
    ds = xr.open_zarr(url, consolidated=False)
    offsets = {None: None} if spec is None else {k: g.offsets for k, g in spec.groups.items()}
    for batch in ib.Loader(node):
        got = _numpy(batch)
        for key, channels in names.items():
            group_offsets = offsets[None if spec is None else key]
            assert got[key].shape[-3] == len(channels)
            for c, channel in enumerate(channels):
                variable, _, level = channel.partition("_")  # "t2m", or "z" and "500"
                want = _expected_values(
                    ds, variable, [int(level)] if level else [], got, group_offsets
                )
                if level:
                    want = want[..., 0, :, :]  # the one level of `ds.z.sel(level=[500])`
                np.testing.assert_array_equal(got[key][..., c, :, :], want, err_msg=channel)
    assert names[next(iter(names))][-3:] == ["z_500", "z_1000", "z_250"]


@pytest.mark.parametrize("shape", ["plain", "windowed patches"])
def test_reordered_levels_resume_exactly(stores: dict[str, str], shape: str) -> None:
    spec, patches = SHAPES[shape]
    url = stores["descending-v3"]
    check_every_cut(
        lambda: build_stage(
            url, "device", spec=spec, patches=patches, levels=[500, 850, 50], batch_size=4
        )
    )


def test_channels_and_statistics_are_per_level(stores: dict[str, str]) -> None:
    url = stores["xarray-v3"]
    source = ib.ZarrSource.open(url, ["t2m", "z"], levels=[500, 850])
    assert ib.batch_channels(source.layouts, None, stacked=True) == {
        "fields": ["t2m", "z_500", "z_850"]
    }
    stats = ib.compute_stats(url, ["t2m", "z"], split="all", levels=[500, 850])
    assert stats.channels["z"] == ["z_500", "z_850"]
    ds = xr.open_zarr(url, consolidated=False)
    expected = ds.z.sel(level=[500, 850]).mean(dim=("time", "lat", "lon")).values
    np.testing.assert_allclose(stats.mean["z"], expected, rtol=1e-6)
    loader = ib.build_loader(
        url, ["t2m", "z"], "all", levels=[500, 850], stack=True, normalise=stats, device="cpu"
    )
    batch = next(iter(loader))
    assert batch["fields"].shape[1:] == (3, 3, 4)


def test_a_state_saved_with_other_levels_is_refused(stores: dict[str, str]) -> None:
    url = stores["native-v3"]
    loader = ib.build_loader(url, ["z"], levels=[500], batch_size=4, device="cpu")
    next(iter(loader))
    state = loader.state_dict()
    other = ib.build_loader(url, ["z"], levels=[850], batch_size=4, device="cpu")
    with pytest.raises(
        ValueError, match=r"array 'z' kept positions \(levels, an area\) were \[1, \[3\]\]"
    ):
        other.load_state_dict(state)
        next(iter(other))


def test_a_state_saved_with_the_levels_in_another_order_is_refused(
    stores: dict[str, str],
) -> None:
    """Its batches held the channels in another order: refused, saying which positions in
    which order it kept; the same levels in the same order resume."""
    url = stores["descending-v3"]
    loader = ib.build_loader(url, ["z"], levels=[500, 850], batch_size=4, device="cpu")
    next(iter(loader))
    state = loader.state_dict()
    same = ib.build_loader(url, ["z"], levels=[500, 850.0], batch_size=4, device="cpu")
    same.load_state_dict(state)
    next(iter(same))
    other = ib.build_loader(url, ["z"], levels=[850, 500], batch_size=4, device="cpu")
    with pytest.raises(
        ValueError, match=r"array 'z' kept positions \(levels, an area\) were \[1, \[3, 1\]\]"
    ):
        other.load_state_dict(state)
        next(iter(other))


@pytest.mark.parametrize("stats_levels", [[850, 50, 500], [50, 500, 850]])
def test_statistics_normalise_each_level_whatever_order_they_were_computed_in(
    stores: dict[str, str], stats_levels: list[int]
) -> None:
    """Statistics computed with the levels in the loader's order or in another one (on a
    store keeping them descending): per level, each what xarray's mean gives, and each
    stacked channel is normalised by its own level's."""
    url = stores["descending-v3"]
    levels = [850, 50, 500]
    stats = ib.compute_stats(url, ["t2m", "z"], split="all", levels=stats_levels)
    assert stats.channels["z"] == [f"z_{v}" for v in stats_levels]
    ds = xr.open_zarr(url, consolidated=False)
    expected = ds.z.sel(level=stats_levels).mean(dim=("time", "lat", "lon")).values
    np.testing.assert_allclose(stats.mean["z"], expected, rtol=1e-6)
    loader = ib.build_loader(
        url,
        ["t2m", "z"],
        "all",
        levels=levels,
        stack=True,
        normalise=stats,
        batch_size=5,
        evaluation=True,
        device="cpu",
    )
    mean, std = stats.vectors(["t2m", "z_850", "z_50", "z_500"])
    for batch in loader:
        steps = batch["sample_index"].numpy()
        stored = np.concatenate(
            [ds.t2m.values[steps][:, None], ds.z.sel(level=levels).values[steps]], axis=1
        )
        want = (stored - mean[:, None, None]) / std[:, None, None]
        np.testing.assert_allclose(batch["fields"].numpy(), want, rtol=1e-5, atol=1e-5)


def test_what_cannot_be_picked_is_refused_by_name(stores: dict[str, str], tmp_path: Path) -> None:
    url = stores["xarray-v3"]
    with pytest.raises(
        ValueError,
        match=r"level 925 is not in 'z''s 'level' coordinate \(50, 100, 250, 500, 700, 850, "
        r"1000\); pick levels from those values",
    ):
        ib.build_loader(url, ["z"], levels=[500, 925])
    with pytest.raises(ValueError, match=r"levels= names 't2m', which has no axis between time"):
        ib.build_loader(url, ["t2m", "z"], levels={"t2m": [500]})
    with pytest.raises(ValueError, match=r"levels= names variable\(s\) \['q'\] that are not"):
        ib.build_loader(url, ["z"], levels={"q": [500]})
    with pytest.raises(ValueError, match="levels for 'z' is empty"):
        ib.build_loader(url, ["z"], levels=[])
    with pytest.raises(TypeError, match="must be a list of level values"):
        ib.build_loader(url, ["z"], levels="500")
    with pytest.raises(ValueError, match=r"none of \['t2m'\] has a level axis"):
        ib.build_loader(url, ["t2m"], levels=[500])
    plain, _ = write_store(tmp_path / "plain.zarr", {"q": ((8, 3, 2, 2), (4, 3, 2, 2), "f4")})
    with pytest.raises(ValueError, match=r"levels= needs 'q''s level axis: .* no dimension names"):
        ib.build_loader(plain, levels=[500])


def test_levels_of_a_subset_read_through_a_fine_grid_manifest(tmp_path: Path) -> None:
    """t2m chunked 5 hours and z chunked 7 (units of 35) over 84 hours get a manifest on
    the fine grid of 5; z alone with picked levels reads that manifest's val hours,
    exactly `ds.sel(level=...)`."""
    times = hourly("2020-01-01T00", 84)
    t2m = np.arange(84 * 6, dtype=np.float32).reshape(84, 2, 3)
    z = np.arange(84 * 3 * 6, dtype=np.float32).reshape(84, 3, 2, 3)
    ds = xr.Dataset(
        {"t2m": (("time", "lat", "lon"), t2m), "z": (("time", "level", "lat", "lon"), z)},
        coords={"time": times, "level": [1000, 850, 500], "lat": [0.0, 1.0], "lon": [0.0, 1, 2]},
    )
    url = str(tmp_path / "s.zarr")
    encoding = {"t2m": {"chunks": (5, 2, 3)}, "z": {"chunks": (7, 1, 2, 3)}}
    ds.to_zarr(url, zarr_format=3, encoding=encoding, consolidated=False)
    opened = ib.ZarrSource.open(url)
    assert opened.manifest.unit_length == 5
    saved = tmp_path / "manifest.json"
    saved.write_text(opened.manifest.dumps())
    loader = ib.build_loader(
        url,
        variables=["z"],
        levels=[500, 1000],
        manifest=saved,
        split="val",
        batch_size=4,
        evaluation=True,
        device="cpu",
    )
    batches = list(loader)
    steps = np.concatenate([b["sample_index"].numpy() for b in batches])
    (first, stop), *_ = opened.step_ranges("val").tolist()
    np.testing.assert_array_equal(steps, np.arange(first, stop))
    got = np.concatenate([as_numpy(b["z"]) for b in batches])
    np.testing.assert_array_equal(got, ds.z.sel(level=[500, 1000]).values[steps])


def test_levels_by_variable_naming_one_not_loaded_is_refused(
    stores: dict[str, str], tmp_path: Path
) -> None:
    """A typo in `levels={...}` would keep every level of the variable meant: refused,
    naming it and what the loader has, for one store and for a join of two."""
    url = stores["xarray-v3"]
    unknown = r"levels= names variable\(s\) \['zz'\] that are not selected"
    with pytest.raises(ValueError, match=unknown):
        ib.build_loader(url, variables=["z"], levels={"zz": [500]})
    surface = xr.open_zarr(url)[["t2m"]].rename(t2m="u10").load()
    surface.to_zarr(str(tmp_path / "surface.zarr"), mode="w", consolidated=False)
    with pytest.raises(ValueError, match=unknown):
        ib.build_loader(
            [url, str(tmp_path / "surface.zarr")], variables=["z", "u10"], levels={"zz": [500]}
        )
