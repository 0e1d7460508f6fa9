"""Holes in an inner join (issue 37): a date inside the shared period that one store lacks
is left out of every store, as `xr.merge(join="inner")` leaves it out; the other store's
map jumps over its step (`core.step_runs`). Every sample, windows and leads across a hole
included, equals the merged Dataset at its joined position, with holes in either store,
at 1, 4 and 24 steps a chunk; resume mid-epoch is exact, and a state of another hole
pattern is refused by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from insitubatch_nodes import SampleSpec, build_loader, open_source
from insitubatch_nodes.core.sample_spec import leads, window
from tests.helpers.batches import as_numpy, batch_key, torch_roundtrip
from tests.helpers.joined_stores import era5_join, merged

FIELDS = ["t", "z", "t2m", "msl"]
pytestmark = pytest.mark.filterwarnings("ignore")  # xarray's and zarr's notes on Zarr v3


def loader(urls: list[str], **settings: Any) -> Any:
    settings = {"split": "all", "batch_size": 8, "seed": 4, "device": "cpu", **settings}
    return build_loader(urls, join="inner", **settings)


@pytest.mark.parametrize("chunk", [1, 4, 24])
@pytest.mark.parametrize("holed", ["surface", "pressure"])
def test_a_hole_in_either_store_is_left_out_of_both(tmp_path: Path, chunk: int, holed: str) -> None:
    """The pressure store (chunked `chunk` steps) starts 8 steps early; one store lacks
    three dates inside the shared period, two of them side by side: the joined axis is the
    merge's, and an epoch reads every joined step once, each the merged values."""
    drop = {f"{holed}_drop": (20, 57, 58)}
    urls = era5_join(
        tmp_path,
        pressure=(0, 130),
        surface_steps=(8, 120),
        pressure_chunk=chunk,
        zarr_format=2 if chunk == 4 else 3,
        **drop,
    )
    reference = merged(urls, "inner")
    assert reference.sizes["time"] == 117
    made = loader(urls)
    seen = []
    for batch in made:
        steps = as_numpy(batch["sample_index"])
        for name in FIELDS:
            expected = reference[name].isel(time=steps).values
            np.testing.assert_array_equal(as_numpy(batch[name]), expected, err_msg=name)
        seen += steps.tolist()
    assert sorted(seen) == list(range(117))
    other = "pressure" if holed == "surface" else "surface"
    jumps = {name: layout.runs for name, layout in open_source(urls, join="inner").layouts.items()}
    assert all(len(jumps[n]) == 2 for n in (["t", "z"] if other == "pressure" else ["t2m", "msl"]))


def test_windows_and_leads_across_a_hole_are_the_merge_then_isel(tmp_path: Path) -> None:
    """A window and a lead count joined steps: across a hole they reach the dates on its
    other side, as `merged.isel(time=t + offset)` does."""
    urls = era5_join(tmp_path, pressure=(0, 100), surface_steps=(8, 92), surface_drop=(30, 31))
    reference = merged(urls, "inner")
    spec = SampleSpec({"inputs": window(["t", "t2m"], steps=3), "targets": leads(["msl"], [2])})
    seen = []
    for batch in loader(urls, spec=spec):
        steps = as_numpy(batch["sample_index"])
        for name, offsets in (
            ("inputs/t", [-2, -1, 0]),
            ("inputs/t2m", [-2, -1, 0]),
            ("targets/msl", [2]),
        ):
            variable = name.split("/")[1]
            expected = np.stack(
                [reference[variable].isel(time=steps + o).values for o in offsets], axis=1
            )
            np.testing.assert_array_equal(as_numpy(batch[name]), expected, err_msg=name)
        seen += steps.tolist()
    assert sorted(seen) == list(range(2, reference.sizes["time"] - 2))


def test_resume_mid_epoch_across_holes_and_another_hole_pattern_is_refused(
    tmp_path: Path,
) -> None:
    urls = era5_join(tmp_path, pressure=(0, 100), surface_steps=(8, 92), surface_drop=(30, 60))
    whole = [batch_key(b) for b in loader(urls)]
    interrupted = iter(made := loader(urls))
    assert [batch_key(next(interrupted)) for _ in range(4)] == whole[:4]
    state = torch_roundtrip(json.loads(json.dumps(made.state_dict())))
    resumed = loader(urls)
    resumed.load_state_dict(state)
    assert [batch_key(b) for b in resumed] == whole[4:]
    moved = era5_join(
        tmp_path / "moved", pressure=(0, 100), surface_steps=(8, 92), surface_drop=(30, 61)
    )
    other = loader(moved)
    other.load_state_dict(state)
    with pytest.raises(
        ValueError,
        match=r"joined step 59 to its step 69.*this loader reads.*joined step 60 to its step 70",
    ):
        next(iter(other))


def test_joined_datasets_with_a_hole_are_their_merge(tmp_path: Path) -> None:
    """A list of Datasets opened with `xr.open_zarr`, one lacking a date the other holds,
    yields what `xr.merge(datasets, join="inner")` holds."""
    urls = era5_join(tmp_path, pressure=(0, 60), surface_steps=(4, 50), surface_drop=(17,))
    datasets = [xr.open_zarr(urls[0])[["t"]], xr.open_zarr(urls[1])[["t2m"]]]
    reference = xr.merge(datasets, join="inner")
    seen = []
    for batch in loader(datasets):
        steps = as_numpy(batch["sample_index"])
        for name in ("t", "t2m"):
            expected = reference[name].isel(time=steps).values
            np.testing.assert_array_equal(as_numpy(batch[name]), expected, err_msg=name)
        seen += steps.tolist()
    assert sorted(seen) == list(range(reference.sizes["time"])) and len(seen) == 49
