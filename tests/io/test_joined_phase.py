"""A misaligned inner join read once (issue 37): a pressure-level store chunked 24 steps
that starts 8 steps before a surface store chunked 1 step. The joined axis' units start
at step 16, where the pressure store's chunks start (`core.unit_phase`), so an epoch
decodes each of its chunks once; every sample still equals `xr.merge(join="inner")`,
with windows, leads, a stride, date splits and revisits; resume and elastic resume are
exact, and a state cut on another phase is refused by name."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

from insitubatch_nodes import SampleSpec, build_loader, open_source
from insitubatch_nodes.cli.split_command import split_manifest, split_text
from insitubatch_nodes.core.sample_spec import leads, window
from insitubatch_nodes.loader.rank_states import RANK_STATES_KEY
from tests.helpers.batches import as_numpy, batch_key, torch_roundtrip
from tests.helpers.joined_stores import era5_join, merged

FIELDS = ["t", "z", "t2m", "msl"]
STEPS = 192  # joined steps: 8 units of 24 and the 16 steps before the phase
pytestmark = pytest.mark.filterwarnings("ignore")  # xarray's and zarr's notes on Zarr v3


def misaligned(folder: Path, zarr_format: int = 3) -> list[str]:
    """The pressure store from 2020-01-01 (200 steps, chunks of 24), the surface store 8
    steps later (192 steps, chunks of 1)."""
    return era5_join(
        folder, zarr_format=zarr_format, pressure=(0, STEPS + 8), surface_steps=(8, STEPS)
    )


def loader(urls: list[str], **settings: Any) -> Any:
    settings = {"split": "all", "batch_size": 8, "seed": 2, "device": "cpu", **settings}
    return build_loader(urls, join="inner", **settings)


def check_against(batches: list[Mapping[str, Any]], reference: xr.Dataset) -> list[int]:
    """Each batch's variables equal `reference` at its samples; the samples, in order."""
    seen: list[int] = []
    for batch in batches:
        steps = as_numpy(batch["sample_index"])
        for name in FIELDS:
            expected = reference[name].isel(time=steps).values
            np.testing.assert_array_equal(as_numpy(batch[name]), expected, err_msg=name)
        seen += steps.tolist()
    return seen


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_each_pressure_chunk_is_decoded_once_and_every_sample_is_the_merge(
    tmp_path: Path, zarr_format: int
) -> None:
    urls = misaligned(tmp_path, zarr_format)
    assert open_source(urls, join="inner").geometry.phase == 16
    reference = merged(urls, "inner")
    made = loader(urls)
    seen = check_against(list(made), reference)
    assert sorted(seen) == list(range(STEPS))
    assert made.stats()["chunk_amplification"] == 1.0  # 1.69 with units at step 0


def test_windows_leads_a_stride_date_splits_and_revisits_on_a_phased_join(
    tmp_path: Path,
) -> None:
    """A spec's windows and leads, a stride, a split by dates that ends inside a unit and
    revisits read what the merged Dataset holds at each joined step, on the joined axis."""
    urls = misaligned(tmp_path)
    reference = merged(urls, "inner")
    spec = SampleSpec({"inputs": window(["t", "t2m"], steps=2), "targets": leads(["z"], [1])})
    made = loader(
        urls,
        spec=spec,
        stride=2,
        revisits=2,
        splits={"train": ("2020-01-03", "2020-02-05T12"), "val": ("2020-02-06", "2020-02-16")},
        split="train",
    )
    first = int(np.searchsorted(reference.time.values, np.datetime64("2020-01-03")))
    last = int(np.searchsorted(reference.time.values, np.datetime64("2020-02-05T12")))
    seen = []
    for batch in made:
        steps = as_numpy(batch["sample_index"])
        for name, offsets in (("inputs/t", [-2, 0]), ("inputs/t2m", [-2, 0]), ("targets/z", [2])):
            variable = name.split("/")[1]
            expected = np.stack(
                [reference[variable].isel(time=steps + o).values for o in offsets], axis=1
            )
            np.testing.assert_array_equal(as_numpy(batch[name]), expected, err_msg=name)
        seen += steps.tolist()
    # every even step whose window and lead stay inside the split's steps, once
    wanted = [s for s in range(first + 2, last + 1 - 2) if s % 2 == 0]
    assert sorted(seen) == wanted


def _fingerprints(state: Any) -> Iterator[dict[str, Any]]:
    """Every fingerprint a loader state records, wherever the graph nests it."""
    if isinstance(state, Mapping):
        for key, value in state.items():
            if key == "fingerprint" and isinstance(value, dict):
                yield value
            else:
                yield from _fingerprints(value)
    elif isinstance(state, list):
        for value in state:
            yield from _fingerprints(value)


def test_resume_mid_epoch_on_a_phased_join_and_a_state_of_phase_zero_is_refused(
    tmp_path: Path,
) -> None:
    """A state saved after three batches resumes the rest of the uninterrupted epoch; the
    same state as a release that cut units from step 0 saved it is refused by name."""
    urls = misaligned(tmp_path)
    whole = [batch_key(b) for b in loader(urls)]
    interrupted = iter(made := loader(urls))
    assert [batch_key(next(interrupted)) for _ in range(3)] == whole[:3]
    state = torch_roundtrip(json.loads(json.dumps(made.state_dict())))
    resumed = loader(urls)
    resumed.load_state_dict(state)
    assert [batch_key(b) for b in resumed] == whole[3:]
    fingerprints = list(_fingerprints(state))
    assert fingerprints and all(f["split"]["phase"] == 16 for f in fingerprints)
    for fingerprint in fingerprints:
        del fingerprint["split"]["phase"]
    older = loader(urls)
    older.load_state_dict(state)
    with pytest.raises(ValueError, match="cut into units from step 0 of the joined axis"):
        next(iter(older))


def test_elastic_resume_on_a_phased_join_sees_every_sample_once(tmp_path: Path) -> None:
    """Three ranks (the short unit before the phase dealt with the others) cut after two
    batches, resumed on two: the epoch's rest covers every sample not seen, and only the
    ranks' padding repeats any."""
    urls = misaligned(tmp_path)
    reference = merged(urls, "inner")
    group = [loader(urls, rank=r, world_size=3, batch_size=4) for r in range(3)]
    before: list[Any] = []
    for made in group:
        iterator = iter(made)
        before += [next(iterator) for _ in range(2)]
    state = torch_roundtrip({RANK_STATES_KEY: [made.state_dict() for made in group]})
    after: list[Any] = []
    for rank in range(2):
        again = loader(urls, rank=rank, world_size=2, batch_size=4)
        again.load_state_dict(state)
        after += list(again)
    seen = check_against(before + after, reference)
    assert set(seen) == set(range(STEPS))
    assert len(seen) - STEPS <= 2 * 24  # the two ranks pad at most a unit each


def test_a_date_manifest_of_the_join_keeps_its_phase_and_says_where_units_start(
    tmp_path: Path,
) -> None:
    """`insitubatch split`'s manifest of a phased join records the phase, its text says
    where the first full unit starts, and a loader given that manifest reads its units."""
    urls = misaligned(tmp_path)
    splits = {"train": ("2020-01-03", "2020-02-05T12"), "val": ("2020-02-06", "2020-02-16")}
    manifest = split_manifest(urls, splits, join="inner")
    assert manifest.phase == 16 and manifest.to_json()["phase"] == 16
    assert "units of 24 step(s), the first full one from step 16" in split_text(manifest)
    reference = merged(urls, "inner")
    seen = check_against(list(loader(urls, manifest=manifest, split="val")), reference)
    assert sorted(seen) == list(range(136, 180))
