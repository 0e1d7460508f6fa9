"""Batches as `xr.open_zarr(path)` shows the data (issue 32): every sample of an epoch
equals xarray's value at its step (NaN == NaN) for packed and fill-valued variables written
by `to_zarr` (v2 and v3, consolidated or not), stacked or not, windowed, cast with
`dtype=`; resume stays exact; a state or statistics saved on other values are refused;
statistics skip NaN and count it; `fill_nan` replaces it after normalising."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import insitubatch_nodes as ib
from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY
from tests.helpers.batches import as_numpy, torch_roundtrip
from tests.helpers.cf_stores import CASES, write_attributes, write_encoded
from tests.helpers.resume_check import check_every_cut

xr = pytest.importorskip("xarray")

SPEC = ib.SampleSpec({"inputs": ib.window(["v"], steps=2), "targets": ib.leads(["v"], [1])})


def _shown(url: str) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return xr.open_zarr(url)["v"].values


def _loader(url: str, **settings: Any) -> Any:
    defaults = {"split": "all", "batch_size": 5, "device": "cpu", "block_chunks": 2}
    return ib.build_loader(url, ["v"], **{**defaults, **settings})


def _same(got: Any, expected: np.ndarray) -> None:
    got = as_numpy(got)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert np.array_equal(got, expected, equal_nan=True)


def _epoch_samples(loader: Any, key: str = "v") -> dict[int, np.ndarray]:
    seen = {}
    for batch in loader:
        for row, step in enumerate(as_numpy(batch[SAMPLE_INDEX_KEY]).tolist()):
            seen[step] = as_numpy(batch[key])[row]
    return seen


@pytest.mark.parametrize("consolidated", [False, True])
@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_sample_is_what_xarray_shows_at_its_step(
    tmp_path: Path, case: str, zarr_format: int, consolidated: bool
) -> None:
    url = write_encoded(
        tmp_path / "s.zarr", case, zarr_format=zarr_format, consolidated=consolidated
    )
    shown = _shown(url)
    seen = _epoch_samples(_loader(url))
    assert sorted(seen) == list(range(shown.shape[0]))
    for step, sample in seen.items():
        _same(sample, shown[step])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_stored_values_with_decode_cf_false(tmp_path: Path, zarr_format: int) -> None:
    url = write_encoded(tmp_path / "s.zarr", "int16_packed_fill", zarr_format=zarr_format)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stored = xr.open_zarr(url, mask_and_scale=False)["v"].values
    assert stored.dtype == np.int16
    for step, sample in _epoch_samples(_loader(url, decode_cf=False)).items():
        _same(sample, stored[step])


def _write_with_dates_and_durations(path: Path, zarr_format: int) -> str:
    """A field `v` beside `valid` (dates) and `lag` (durations), each (time, lat), by
    xarray's `to_zarr`: stored as int64 with the attributes xarray decodes them by."""
    times = np.arange("2000-01-01T00", "2000-01-01T06", dtype="datetime64[h]")
    times = times.astype("datetime64[ns]")
    ds = xr.Dataset(
        {
            "v": (("time", "lat"), np.arange(18, dtype="float32").reshape(6, 3)),
            "valid": (("time", "lat"), np.repeat(times[:, None], 3, axis=1)),
            "lag": (("time", "lat"), np.full((6, 3), 3_600_000_000_000, "timedelta64[ns]")),
        },
        coords={"time": times},
    )
    ds.to_zarr(str(path), zarr_format=zarr_format, consolidated=False)
    return str(path)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_variables_xarray_shows_as_dates_or_durations_are_refused_by_name(
    tmp_path: Path, zarr_format: int
) -> None:
    url = _write_with_dates_and_durations(tmp_path / "s.zarr", zarr_format)
    shown = xr.open_zarr(url, consolidated=False)
    assert shown["valid"].dtype.kind == "M" and shown["lag"].dtype.kind == "m"
    defaults = {"split": "all", "batch_size": 2, "device": "cpu"}
    with pytest.raises(ValueError, match=r"variable 'valid' is shown by xr.open_zarr as dates"):
        ib.build_loader(url, ["v", "valid"], **defaults)
    with pytest.raises(ValueError, match=r"variable 'lag' is shown by xr.open_zarr as durat"):
        ib.build_loader(url, ["lag"], **defaults)
    # the default choice leaves them out, as it leaves coordinates out
    batch = next(iter(ib.build_loader(url, **defaults)))
    assert {k for k in batch if k != SAMPLE_INDEX_KEY} == {"v"}
    # their stored numbers, when asked for
    stored = xr.open_zarr(url, consolidated=False, decode_cf=False)["valid"].values
    first = next(iter(ib.build_loader(url, ["valid"], decode_cf=False, **defaults)))
    assert np.array_equal(as_numpy(first["valid"]), stored[as_numpy(first[SAMPLE_INDEX_KEY])])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, "float16"])
@pytest.mark.parametrize("stack", [False, True])
def test_a_cast_batch_equals_xarrays_values_cast(tmp_path: Path, dtype: Any, stack: bool) -> None:
    url = write_encoded(tmp_path / "s.zarr", "uint16_packed_fill", zarr_format=3)
    shown = torch.from_numpy(_shown(url))
    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    key = "fields" if stack else "v"
    for batch in _loader(url, dtype=dtype, stack=stack):
        got = batch[key][:, 0] if stack else batch[key]
        expected = shown[batch[SAMPLE_INDEX_KEY]].to(torch_dtype)
        assert got.dtype == torch_dtype
        assert torch.equal(got.nan_to_num(-1.0), expected.nan_to_num(-1.0))


def test_stacked_variables_of_other_stored_dtypes_are_decoded_before_the_stack(
    tmp_path: Path,
) -> None:
    packed = write_encoded(tmp_path / "p.zarr", "int8_packed_fill", zarr_format=3)
    floats = write_encoded(tmp_path / "f.zarr", "float32_fill_1e20", zarr_format=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        both = xr.merge([xr.open_zarr(packed).rename(v="a"), xr.open_zarr(floats).rename(v="b")])
        url = str(tmp_path / "both.zarr")
        both.to_zarr(url, zarr_format=3, consolidated=False)
        shown = xr.open_zarr(url)
    loader = ib.build_loader(url, ["a", "b"], "all", batch_size=5, device="cpu", stack=True)
    for batch in loader:
        steps = as_numpy(batch[SAMPLE_INDEX_KEY])
        expected = np.stack([shown["a"].values[steps], shown["b"].values[steps]], axis=1)
        _same(batch["fields"], expected.astype(np.float64))


def test_windows_and_leads_are_decoded(tmp_path: Path) -> None:
    url = write_encoded(tmp_path / "s.zarr", "int16_packed_fill", zarr_format=2)
    shown = _shown(url)
    for batch in _loader(url, spec=SPEC, split="all"):
        anchors = as_numpy(batch[SAMPLE_INDEX_KEY])
        _same(batch["inputs/v"], shown[anchors[:, None] + np.array([-1, 0])])
        _same(batch["targets/v"], shown[anchors[:, None] + 1])


def test_evaluation_and_patches_are_decoded(tmp_path: Path) -> None:
    url = write_encoded(tmp_path / "s.zarr", "uint8_packed_fill", zarr_format=3)
    shown = _shown(url)
    for step, sample in _epoch_samples(_loader(url, evaluation=True)).items():
        _same(sample, shown[step])
    patches = ib.PatchSpec((2, 2), mode="region", origin=(1, 1))
    for batch in _loader(url, patches=patches):
        steps = as_numpy(batch[SAMPLE_INDEX_KEY])
        _same(batch["v"], shown[steps][:, 1:3, 1:3])


def test_resume_is_exact_with_decoding_on(tmp_path: Path) -> None:
    url = write_encoded(tmp_path / "s.zarr", "int16_packed_fill", zarr_format=3)
    check_every_cut(lambda: _loader(url, split="train", seed=3).root)
    check_every_cut(lambda: _loader(url, split="train", seed=3, stack=True, dtype="float32").root)


def _state_after_one_batch(url: str, **settings: Any) -> dict[str, Any]:
    loader = _loader(url, split="train", **settings)
    next(iter(loader))
    return torch_roundtrip(loader.state_dict())


def _resumed(url: str, state: dict[str, Any], **settings: Any) -> Any:
    loader = _loader(url, split="train", **settings)
    loader.load_state_dict(state)
    return next(iter(loader))


def test_a_state_saved_on_other_values_is_refused_by_name(tmp_path: Path) -> None:
    url = write_encoded(tmp_path / "s.zarr", "int16_packed_fill", zarr_format=3)
    stored = _state_after_one_batch(url, decode_cf=False)  # as releases before decoding
    with pytest.raises(ValueError, match=r"array 'v' was read as stored values .* now decoded"):
        _resumed(url, stored)
    _resumed(url, stored, decode_cf=False)  # the decoding it was saved with
    cast = _state_after_one_batch(url, dtype="float32")
    with pytest.raises(ValueError, match=r"cast to float32 when the state was saved"):
        _resumed(url, cast)
    decoded = _state_after_one_batch(url)
    with pytest.raises(ValueError, match=r"array 'v' was decoded .* now read as stored values"):
        _resumed(url, decoded, decode_cf=False)


def test_a_v2_fill_value_of_zero_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stored = np.arange(4 * 24, dtype=np.int16).reshape(24, 2, 2) % 7
    url = write_attributes(tmp_path / "s.zarr", stored, {}, zarr_format=2, fill_value=0)
    with caplog.at_level(logging.WARNING, logger="insitubatch_nodes.builder"):
        seen = _epoch_samples(_loader(url))
    assert "fill_value is 0" in caplog.text and "use_zarr_fill_value_as_mask=False" in caplog.text
    assert all(np.isnan(seen[s]).sum() == (stored[s] == 0).sum() for s in seen)
    kept = _epoch_samples(_loader(url, use_zarr_fill_value_as_mask=False))
    assert all(np.array_equal(kept[s], stored[s]) for s in kept)


def test_statistics_skip_nan_and_count_it(tmp_path: Path) -> None:
    url = write_encoded(tmp_path / "s.zarr", "int16_packed_fill", zarr_format=3)
    shown = _shown(url)
    stats = ib.compute_stats(url, ["v"], split="all")
    assert stats.nan_count["v"] == [int(np.isnan(shown).sum())]
    assert stats.count["v"] == shown.size
    np.testing.assert_allclose(stats.mean["v"], [np.nanmean(shown)], rtol=1e-12)
    np.testing.assert_allclose(stats.std["v"], [np.nanstd(shown)], rtol=1e-9)
    loader = _loader(url, normalise=stats, fill_nan=0.0)
    for batch in loader:
        steps = as_numpy(batch[SAMPLE_INDEX_KEY])
        normalised = as_numpy(batch["v"])
        assert not np.isnan(normalised).any()
        assert (normalised[np.isnan(shown[steps])] == 0.0).all()
    kept = next(iter(_loader(url, normalise=stats)))
    assert np.isnan(as_numpy(kept["v"])).any()  # NaN stays NaN without fill_nan


def test_statistics_of_other_values_are_refused(tmp_path: Path) -> None:
    url = write_encoded(tmp_path / "s.zarr", "int16_packed_fill", zarr_format=3)
    stored = ib.compute_stats(url, ["v"], split="all", decode_cf=False)
    with pytest.raises(ValueError, match=r"statistics were computed on stored values as int16"):
        _loader(url, normalise=stored)
    _loader(url, normalise=stored, decode_cf=False)  # the values they were computed on
    old = stored.to_json()
    del old["variables"]["v"]["decoding"]  # a file made before decoding was recorded
    with pytest.raises(ValueError, match=r"made before the loader decoded CF attributes"):
        _loader(url, normalise=ib.ChannelStats.from_json(old))
    with pytest.raises(ValueError, match=r"fill_nan=0.0 replaces NaN after normalising"):
        _loader(url, fill_nan=0.0)


def test_a_state_of_stacked_channels_in_another_order_is_refused(tmp_path: Path) -> None:
    packed = write_encoded(tmp_path / "p.zarr", "int16_packed_fill", zarr_format=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        pair = xr.merge([xr.open_zarr(packed).rename(v="a"), xr.open_zarr(packed).rename(v="b")])
        url = str(tmp_path / "pair.zarr")
        pair.to_zarr(url, zarr_format=3, consolidated=False)
    settings = {"split": "train", "batch_size": 5, "device": "cpu", "stack": True}
    first = ib.build_loader(url, ["a", "b"], **settings)
    next(iter(first))
    state = torch_roundtrip(first.state_dict())
    swapped = ib.build_loader(url, ["b", "a"], **settings)
    swapped.load_state_dict(state)
    with pytest.raises(ValueError, match=r"batches held the channels \{'fields': \['a', 'b'\]\}"):
        next(iter(swapped))
    same = ib.build_loader(url, ["a", "b"], **settings)
    same.load_state_dict(state)
    next(iter(same))
