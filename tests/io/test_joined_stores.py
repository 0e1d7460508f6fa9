"""Several stores as one (issue 37): a pressure-level store chunked 24 steps, a surface
store chunked 1 step and a static store, written by xarray, read in place as one source.
Every sample equals `xr.merge([xr.open_zarr(u) ...], join=...)` at its joined position;
dates, grids and names that do not join are refused by name; resume and elastic resume
are exact on a join, and a state of another join is refused."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from insitubatch_nodes import (
    AsyncFetchNode,
    ChunkPermuteNode,
    PatchSpec,
    ReadPlanNode,
    SampleSpec,
    build_loader,
    compute_stats,
    open_source,
)
from insitubatch_nodes.core.sample_spec import leads, window
from insitubatch_nodes.loader.rank_states import RANK_STATES_KEY
from tests.helpers.batches import as_numpy, batch_key, torch_roundtrip
from tests.helpers.joined_stores import (
    LATITUDE,
    cds_named,
    dates,
    era5_join,
    merged,
    pressure_levels,
    s3_and_local_join,
    statics,
    surface,
    write,
)
from tests.helpers.profiles import examples
from tests.helpers.s3_server import S3Server

FIELDS = ["t", "z", "t2m", "msl"]
pytestmark = pytest.mark.filterwarnings("ignore")  # xarray's and zarr's notes on Zarr v3


def loader(urls: Any, **settings: Any) -> Any:
    settings = {"split": "all", "batch_size": 6, "seed": 5, "device": "cpu", **settings}
    return build_loader(urls, **settings)


def check_against(batches: list[dict[str, Any]], reference: xr.Dataset, names: list[str]) -> int:
    """Each batch's variables equal `reference` at its samples' positions; the samples
    seen, counted."""
    seen = []
    for batch in batches:
        steps = as_numpy(batch["sample_index"])
        for name in names:
            expected = reference[name].isel(time=steps).values
            np.testing.assert_array_equal(as_numpy(batch[name]), expected, err_msg=name)
        seen += steps.tolist()
    return len(seen)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_an_inner_join_yields_xarray_merge_at_every_joined_step(
    tmp_path: Path, zarr_format: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The surface store starts 10 steps later and ends 5 earlier: the joined axis is
    theirs in common, the pressure store's 24-step chunks straddle its units, and every
    sample of an epoch equals the merged Dataset, statics included; each store's loss is
    logged."""
    urls = era5_join(tmp_path, zarr_format=zarr_format, pressure=(0, 72), surface_steps=(10, 57))
    reference = merged(urls, "inner")
    with caplog.at_level(logging.INFO, logger="insitubatch_nodes.io.joined_source"):
        batches = list(loader(urls, variables=[*FIELDS, "lsm"], join="inner"))
    assert check_against(batches, reference, FIELDS) == reference.sizes["time"] == 57
    assert sorted(i for b in batches for i in b["sample_index"].tolist()) == list(range(57))
    for batch in batches:
        np.testing.assert_array_equal(as_numpy(batch["lsm"])[0], reference["lsm"].values)
    assert "pl.zarr keeps 57 of its 72 steps (15 left out)" in caplog.text
    assert "sfc.zarr keeps 57 of its 57 steps (0 left out)" in caplog.text


def test_an_exact_join_with_windows_leads_levels_and_date_splits(tmp_path: Path) -> None:
    """On equal dates, a spec's windows and leads (counted in strides), levels picked out
    of order, a stride and a split by dates read what the merged Dataset holds at each
    step."""
    urls = era5_join(tmp_path, pressure=(0, 80), surface_steps=(0, 80))
    reference = merged(urls, "exact").sel(level=[500, 1000])
    spec = SampleSpec({"inputs": window(["t", "t2m"], steps=2), "targets": leads(["msl"], [1])})
    made = loader(
        urls,
        spec=spec,
        levels=[500, 1000],
        stride=2,
        splits={"train": ("2020-01-02", "2020-01-15")},
        split="train",
    )
    count = 0
    for batch in made:
        steps = as_numpy(batch["sample_index"])
        days = reference.time.values[steps]
        assert (days >= np.datetime64("2020-01-02")).all()
        assert (steps % 2 == 0).all()
        for name, offsets in (("inputs/t", [-2, 0]), ("inputs/t2m", [-2, 0]), ("targets/msl", [2])):
            variable = name.split("/")[1]
            expected = np.stack(
                [reference[variable].isel(time=steps + o).values for o in offsets], axis=1
            )
            np.testing.assert_array_equal(as_numpy(batch[name]), expected, err_msg=name)
        count += steps.size
    assert count > 0


def test_one_store_in_a_list_is_that_store(tmp_path: Path) -> None:
    """A list of one store is the store: the same batches and the same state."""
    [url, *_] = era5_join(tmp_path)
    alone, listed = loader(url), loader([url], storage_options=[None])
    assert [batch_key(b) for b in alone] == [batch_key(b) for b in listed]
    assert alone.state_dict() == listed.state_dict()


def test_mismatched_dates_are_refused_by_name_under_join_exact(tmp_path: Path) -> None:
    urls = era5_join(tmp_path, pressure=(0, 30), surface_steps=(2, 30))
    with pytest.raises(ValueError) as refused:
        loader(urls, variables=FIELDS)
    text = str(refused.value)
    assert "join='exact' needs the same dates" in text
    assert "2020-01-01T00:00 in " in text and "pl.zarr" in text and "sfc.zarr" in text


def test_mismatched_grids_duplicate_names_and_bad_options_are_refused(tmp_path: Path) -> None:
    pl = write(pressure_levels(dates(0, 30)), tmp_path / "pl.zarr", 24, 3)
    shifted = LATITUDE + np.array([0, 0, 0.01, 0, 0])
    other = write(surface(dates(0, 30), latitude=shifted), tmp_path / "other.zarr", 1, 3)
    with pytest.raises(ValueError) as refused:
        loader([pl, other])
    assert "the latitude of" in str(refused.value) and "grid point (2, 0)" in str(refused.value)
    again = write(pressure_levels(dates(0, 30), seed=9), tmp_path / "again.zarr", 24, 3)
    with pytest.raises(ValueError) as refused:
        loader([pl, again])
    assert "'t' is an array of" in str(refused.value)
    assert "pl.zarr and of" in str(refused.value) and "again.zarr" in str(refused.value)
    with pytest.raises(ValueError, match="a list of length 1, and source joins 2 stores"):
        loader([pl, other], storage_options=[{}])
    with pytest.raises(ValueError, match=r"either xarray Datasets or stores .*, not both"):
        loader([xr.open_zarr(pl), pl])


@pytest.mark.parametrize(("zarr_format", "join"), [(2, "exact"), (3, "exact"), (3, "inner")])
def test_stores_that_name_time_differently_join_on_their_own_time_coordinates(
    tmp_path: Path, zarr_format: int, join: str
) -> None:
    """A WeatherBench2-style store names time `time`, a CDS-style one `valid_time`: each
    is read along its own coordinate, by value, and every sample equals the merge of the
    Datasets with the second renamed; the joined axis takes the first store's name."""
    surface_steps = (0, 40) if join == "exact" else (7, 26)
    urls = [
        write(pressure_levels(dates(0, 40)), tmp_path / "pl.zarr", 24, zarr_format),
        write(cds_named(surface(dates(*surface_steps))), tmp_path / "sfc.zarr", 1, zarr_format),
        write(statics(), tmp_path / "static.zarr", None, zarr_format),
    ]
    opened = [xr.open_zarr(url) for url in urls]
    reference = xr.merge([opened[0], opened[1].rename(valid_time="time"), opened[2]], join=join)
    batches = list(loader(urls, variables=[*FIELDS, "lsm"], join=join))
    assert check_against(batches, reference, FIELDS) == reference.sizes["time"]
    for batch in batches:
        np.testing.assert_array_equal(as_numpy(batch["lsm"])[0], reference["lsm"].values)
    assert open_source(urls[:2], join=join).time_axis().name == "time"
    assert open_source(urls[1::-1], join=join).time_axis().name == "valid_time"


def test_a_store_whose_time_coordinate_cannot_be_found_is_refused_by_name(
    tmp_path: Path,
) -> None:
    """Dates are what a join aligns on: a store without them is named, whether its time
    dimension has a usual name or not."""
    pl = write(pressure_levels(dates(0, 30)), tmp_path / "pl.zarr", 24, 3)
    timeless = cds_named(surface(dates(0, 30))).drop_vars("valid_time")
    nameless = write(timeless.rename(valid_time="step"), tmp_path / "step.zarr", 1, 3)
    undated = write(timeless, tmp_path / "undated.zarr", 1, 3)
    with pytest.raises(ValueError, match=r"undated.zarr has no time coordinate for \['t2m'\]"):
        loader([pl, undated], variables=["t", "t2m"])
    with pytest.raises(ValueError, match=r"step.zarr has no time coordinate for 't2m'"):
        loader([pl, nameless], variables=["t", "t2m"])


def test_stores_of_other_levels_align_as_xarray_merge_aligns_them(tmp_path: Path) -> None:
    """A store of `t` on 1000, 850 and 500 hPa beside one of `z` on 850, 500 and 250: the
    inner merge gives both 850 and 500, and so does the loader; the exact merge refuses,
    and so does the loader, naming both stores' levels; levels= both hold are read."""
    days = dates(0, 30)
    other = pressure_levels(days, seed=7)[["z"]].assign_coords(level=[850, 500, 250])
    urls = [
        write(pressure_levels(days)[["t"]], tmp_path / "t.zarr", 24, 3),
        write(other, tmp_path / "z.zarr", 1, 3),
    ]
    reference = merged(urls, "inner")
    assert list(reference.level.values) == [850, 500]
    batches = list(loader(urls, join="inner"))
    assert check_against(batches, reference, ["t", "z"]) == 30
    with pytest.raises(ValueError):
        merged(urls, "exact")
    with pytest.raises(ValueError) as refused:
        loader(urls)
    text = str(refused.value)
    assert "the 'level' coordinates of the joined stores differ" in text
    assert "t.zarr holds [1000, 850, 500] and " in text and "z.zarr holds [850, 500, 250]" in text
    picked = list(loader(urls, levels=[500]))
    assert check_against(picked, reference.sel(level=[500]), ["t", "z"]) == 30


def _take(made: Any, batches: int) -> tuple[list[Any], Any]:
    iterator = iter(made)
    return [batch_key(next(iterator)) for _ in range(batches)], iterator


def test_a_join_by_hand_reads_each_store_and_refuses_decoding_on_a_device(
    tmp_path: Path,
) -> None:
    """A graph built by hand over `open_source`'s join reads each variable from its own
    store (a block equals the merged Dataset), and its fetch node refuses to decode on a
    device (the device reader reads one store) before any read."""
    urls = era5_join(tmp_path, pressure=(0, 48), surface_steps=(4, 40))
    source = open_source(urls, FIELDS, join="inner")
    assert [part.origin for part in source.parts] == [4, 0]
    context = source.read_context()
    assert [sorted(part.layouts) for part in context.stores] == [["t", "z"], ["msl", "t2m"]]
    permute = ChunkPermuteNode(source.geometry, source.split_units("all"), seed=1)
    plans = ReadPlanNode(permute, source.geometry, block_chunks=2)
    fetch = AsyncFetchNode(plans, context)
    block = next(iter(fetch))
    reference = merged(urls, "inner")
    for name in FIELDS:
        rows = block.plan.rows[name][:, 0]
        if block.memory is not None and block.memory.shifts is not None:  # leased slots
            segment = np.searchsorted(block.plan.segment_starts[name], rows, side="right") - 1
            rows = rows + block.memory.shifts[name][segment]
        expected = reference[name].values[block.plan.sample_index]
        np.testing.assert_array_equal(block.arrays[name][rows], expected)
    fetch.close()
    with pytest.raises(ValueError, match="a join of several stores does not do yet"):
        AsyncFetchNode(plans, context, decode_on=torch.device("cuda"))


def test_resume_mid_epoch_on_a_join_and_another_join_is_refused(tmp_path: Path) -> None:
    """A state saved after three batches resumes the rest of the uninterrupted epoch; the
    same stores in another order, or under another join, refuse it by name."""
    urls = era5_join(tmp_path, pressure=(0, 72), surface_steps=(10, 57))
    whole = [batch_key(b) for b in loader(urls, join="inner")]
    interrupted = loader(urls, join="inner")
    first, _ = _take(interrupted, 3)
    assert first == whole[:3]
    state = torch_roundtrip(json.loads(json.dumps(interrupted.state_dict())))
    resumed = loader(urls, join="inner")
    resumed.load_state_dict(state)
    assert [batch_key(b) for b in resumed] == whole[3:]
    reordered = loader([urls[1], urls[0]], join="inner")
    for other, why in (
        (reordered, "rebuild the loader on the stores, in the order"),
        (loader(urls[1]), "this loader reads one store"),
    ):
        other.load_state_dict(state)  # checked as the epoch starts
        with pytest.raises(ValueError, match=why):
            next(iter(other))


def test_elastic_resume_on_a_join_sees_every_sample_once(tmp_path: Path) -> None:
    """Two ranks cut after two batches, resumed on one: the epoch's rest covers every
    sample not seen before, once."""
    urls = era5_join(tmp_path, pressure=(0, 72), surface_steps=(10, 57))
    reference = merged(urls, "inner")
    group = [loader(urls, join="inner", rank=r, world_size=2, batch_size=4) for r in range(2)]
    before: list[Any] = []
    for made in group:
        iterator = iter(made)
        before += [next(iterator) for _ in range(2)]
    state = torch_roundtrip({RANK_STATES_KEY: [made.state_dict() for made in group]})
    one = loader(urls, join="inner", rank=0, world_size=1, batch_size=4)
    one.load_state_dict(state)
    after = list(one)
    check_against(before + after, reference, FIELDS)
    seen = [i for b in before + after for i in b["sample_index"].tolist()]
    assert set(seen) == set(range(57)) and len(seen) == 57


@pytest.mark.parametrize(
    "settings",
    [
        dict(forcings=["cos_solar_zenith_angle", "day_progress_sin"], area=(45, 0, -45, 180)),
        dict(stack=True, levels=[850, 500]),
        dict(patches=PatchSpec((2, 4)), evaluation=True),
    ],
    ids=["forcings and area", "stacked levels", "patches in evaluation"],
)
def test_features_on_a_join_equal_one_merged_store(
    tmp_path: Path, settings: dict[str, Any]
) -> None:
    """Forcings (from the joined time and the grid), an area, stacking, levels, patches,
    evaluation and a static field read on a join equal the same loader's over the merged
    Dataset written as one store, sample by sample."""
    urls = era5_join(tmp_path, pressure=(0, 48), surface_steps=(4, 40))
    one = write(merged(urls, "inner"), tmp_path / "merged.zarr", 24, 3)
    settings = {"variables": ["t2m", "t", "lsm"], **settings}
    by_step: dict[int, dict[str, np.ndarray]] = {}
    alone = loader(one, **settings)
    for batch in alone:
        for row, step in enumerate(batch["sample_index"].tolist()):
            by_step[step] = {k: as_numpy(v)[row] for k, v in batch.items() if k != "sample_index"}
    joined = loader(urls, join="inner", **settings)
    assert getattr(joined, "channels", None) == getattr(alone, "channels", None)
    batches = list(joined)
    assert sum(len(b["sample_index"]) for b in batches) == len(by_step) == 40
    for batch in batches:
        for row, step in enumerate(batch["sample_index"].tolist()):
            for key, expected in by_step[step].items():
                np.testing.assert_array_equal(as_numpy(batch[key])[row], expected, err_msg=key)


@settings(
    max_examples=examples(16),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.integers(0, 30),
    st.integers(0, 30),
    st.sampled_from([1, 4, 5, 24]),
    st.sampled_from([1, 3, 7]),
    st.lists(st.integers(0, 35), max_size=2, unique=True),
    st.lists(st.integers(0, 39), max_size=2, unique=True),
    st.integers(1, 3),
)
def test_any_offsets_holes_and_chunkings_read_the_merged_values(
    tmp_path_factory: pytest.TempPathFactory,
    pressure_first: int,
    surface_first: int,
    pressure_chunk: int,
    surface_chunk: int,
    surface_gaps: list[int],
    pressure_gaps: list[int],
    revisits: int,
) -> None:
    """Small stores starting anywhere, chunked anyhow, either store missing some steps
    (a hole the other's map jumps over), on any revisits a unit takes: an epoch reads
    every joined step once, each equal to `xr.merge(join="inner")`."""
    folder = tmp_path_factory.mktemp("join")
    urls = era5_join(
        folder,
        pressure=(pressure_first, 40),
        surface_steps=(surface_first, 36),
        pressure_chunk=pressure_chunk,
        surface_chunk=surface_chunk,
        surface_drop=tuple(surface_gaps),
        pressure_drop=tuple(pressure_gaps),
    )
    reference = merged(urls, "inner")
    kept = reference.time.values
    if kept.size == 0:
        with pytest.raises(ValueError, match="share no date"):
            loader(urls, join="inner")
        return
    try:
        made = loader(urls, join="inner", batch_size=4, revisits=revisits)
    except ValueError as refused:  # revisits must divide the grid's unit
        assert "revisits=" in str(refused)
        return
    batches = list(made)
    assert check_against(batches, reference, FIELDS) == kept.size


def test_statistics_of_a_join_normalise_its_batches(tmp_path: Path) -> None:
    """`compute_stats` over a join gives the merged Dataset's mean and std per channel (a
    static field's of its grid), and a loader normalised with them yields `(x - mean) /
    std` of the merged values."""
    urls = era5_join(tmp_path, pressure=(0, 48), surface_steps=(4, 40))
    reference = merged(urls, "inner")
    stats = compute_stats(urls, ["t2m", "t", "lsm"], split="all", join="inner")
    np.testing.assert_allclose(stats.mean["t2m"], [reference.t2m.mean()], rtol=1e-5)
    levels = reference.t.mean(["time", "latitude", "longitude"]).values
    np.testing.assert_allclose(stats.mean["t"], levels, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stats.std["lsm"], [reference.lsm.std()], rtol=1e-5)
    made = loader(urls, variables=["t2m"], join="inner", normalise=stats)
    for batch in made:
        steps = as_numpy(batch["sample_index"])
        expected = (reference.t2m.values[steps] - stats.mean["t2m"][0]) / stats.std["t2m"][0]
        np.testing.assert_allclose(as_numpy(batch["t2m"]), expected, rtol=1e-5, atol=1e-5)


def test_a_join_of_s3_and_local_stores_with_their_own_options(
    tmp_path: Path, s3_server: S3Server
) -> None:
    """The pressure store on S3 with its credentials, the surface store on local disk with
    none: each read with its own options; no secret in the loader's description."""
    urls = s3_and_local_join(tmp_path, s3_server)
    options = [s3_server.options(), None]
    made = loader(urls, storage_options=options, variables=FIELDS)
    reference = merged([str(tmp_path / "pl.zarr"), urls[1]], "exact")  # the same values, local
    assert check_against(list(made), reference, FIELDS) == 30
    with pytest.raises(TypeError):  # the local store takes no S3 options
        loader(urls, storage_options=s3_server.options(), variables=FIELDS)
