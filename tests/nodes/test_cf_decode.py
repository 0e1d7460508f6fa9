"""CF decoding (`core.cf_decoding`, `io.metadata.cf_attributes`, `nodes.cf_decode`)
against xarray: a whole variable decoded equals `xr.open_zarr(path)[v]`, values, NaN and
dtype, for every encoding real archives use and for encodings drawn at random."""

from __future__ import annotations

import tracemalloc
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from insitubatch_nodes.core.cf_decoding import cf_decoding, check_cast_dtype
from insitubatch_nodes.core.decoded_values import decode_values
from insitubatch_nodes.io.metadata.cf_attributes import read_cf_decoding, zero_fill_warning
from insitubatch_nodes.nodes.cf_decode import CFDecodeNode, decode_tensor
from insitubatch_nodes.nodes.items import Batch
from tests.helpers.cf_stores import CASES, write_attributes, write_encoded
from tests.helpers.profiles import examples

xr = pytest.importorskip("xarray")


def _xarray(url: str, **options: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # xarray's own notes on odd encodings
        return xr.open_zarr(url, consolidated=False, **options)["v"].values


def _xarray_with_fill_mask(url: str, use_zarr_fill_value_as_mask: bool | None) -> Any:
    """What xarray shows with `use_zarr_fill_value_as_mask`: through its store, since
    `xr.open_zarr` (xarray 2026.9) passes None on whatever it is given."""
    store = xr.backends.ZarrStore.open_group(
        url, consolidated=False, use_zarr_fill_value_as_mask=use_zarr_fill_value_as_mask
    )
    return xr.open_dataset(store)["v"].values


def _decoded(url: str, **options: Any) -> np.ndarray:
    array = zarr.open_group(url, mode="r")["v"]
    decoding = read_cf_decoding("v", array, **options)
    stored = np.ascontiguousarray(array[...])
    on_host = decode_values(stored, decoding)  # numpy, where batches are on the host
    on_device = decode_tensor(torch.from_numpy(stored), decoding, None).numpy()  # torch
    assert on_device.dtype == on_host.dtype
    assert np.array_equal(on_device, on_host, equal_nan=True)
    return on_host


def _same(got: np.ndarray, expected: np.ndarray) -> None:
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert np.array_equal(got, expected, equal_nan=True)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_encoding_decodes_as_xarray_shows_it(
    tmp_path: Path, case: str, zarr_format: int
) -> None:
    url = write_encoded(tmp_path / "s.zarr", case, zarr_format=zarr_format)
    expected = _xarray(url)
    _same(_decoded(url), expected)
    if CASES[case][1].get("_FillValue", np.nan) is not None and case != "float32_fill_nan":
        assert np.isnan(expected).any()  # the fill value was stored and is masked
    _same(_decoded(url, decode_cf=False), _xarray(url, mask_and_scale=False))


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_every_differing_missing_value_and_fill_is_masked(tmp_path: Path, zarr_format: int) -> None:
    stored = np.arange(-6, 42, dtype=np.int16).reshape(4, 3, 4)
    attributes = {"missing_value": [-5, 7], "scale_factor": 0.5, "add_offset": 1.0}
    if zarr_format == 3:
        attributes["_FillValue"] = -6
    url = write_attributes(
        tmp_path / "s.zarr",
        stored,
        attributes,
        zarr_format=zarr_format,
        fill_value=-6 if zarr_format == 2 else 0,
    )
    expected = _xarray(url)
    assert np.isnan(expected).sum() == 3
    _same(_decoded(url), expected)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_use_zarr_fill_value_as_mask_works_as_in_xarray(tmp_path: Path, zarr_format: int) -> None:
    stored = np.arange(48, dtype=np.int16).reshape(4, 3, 4) % 5
    url = write_attributes(tmp_path / "s.zarr", stored, {}, zarr_format=zarr_format, fill_value=0)
    for option in (None, True, False):
        expected = _xarray_with_fill_mask(url, option)
        _same(_decoded(url, use_zarr_fill_value_as_mask=option), expected)


def test_a_v2_fill_value_of_zero_is_warned_about(tmp_path: Path) -> None:
    stored = np.arange(48, dtype=np.int16).reshape(4, 3, 4) % 5
    url = write_attributes(tmp_path / "s.zarr", stored, {}, zarr_format=2, fill_value=0)
    array = zarr.open_group(url, mode="r")["v"]
    decoding = read_cf_decoding("v", array)
    assert decoding.masked == (0,)
    warning = zero_fill_warning("v", array, decoding, None)
    assert warning is not None and "fill_value is 0" in warning
    assert "use_zarr_fill_value_as_mask=False" in warning
    quiet = read_cf_decoding("v", array, use_zarr_fill_value_as_mask=False)
    assert zero_fill_warning("v", array, quiet, False) is None


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_arrays_naming_no_dimensions_decode_from_their_attributes_only(
    tmp_path: Path, zarr_format: int
) -> None:
    stored = np.arange(48, dtype=np.int16).reshape(4, 3, 4)
    attributes = {"scale_factor": 0.5, "add_offset": 10.0, "_FillValue": 5}
    url = write_attributes(
        tmp_path / "s.zarr",
        stored,
        attributes,
        zarr_format=zarr_format,
        fill_value=0,
        named=False,
    )
    expected = stored * 0.5 + 10.0
    expected[stored == 5] = np.nan  # the attribute masks; the zarr fill_value 0 does not
    _same(_decoded(url), expected)


_INTEGERS = ["int8", "uint8", "int16", "uint16", "int32"]


@st.composite
def _encodings(draw: st.DrawFn) -> tuple[np.ndarray, dict[str, Any], int]:
    dtype = np.dtype(draw(st.sampled_from(_INTEGERS)))
    info = np.iinfo(dtype)
    low, high = max(int(info.min), -1000), min(int(info.max), 1000)
    stored = np.random.default_rng(draw(st.integers(0, 2**16))).integers(
        low, high, size=(8, 3, 4), endpoint=True
    )
    stored = stored.astype(dtype)
    values = st.integers(low, high)
    attributes: dict[str, Any] = {}
    if draw(st.booleans()):
        attributes["_FillValue"] = int(stored.flat[draw(st.integers(0, stored.size - 1))])
    if draw(st.booleans()):
        attributes["missing_value"] = draw(values)
    packing = draw(st.sampled_from(["both", "scale", "offset", "none"]))
    if packing in ("both", "scale"):
        attributes["scale_factor"] = draw(st.sampled_from([0.01, 0.5, 1.5e-4, 2.0]))
    if packing in ("both", "offset"):
        attributes["add_offset"] = draw(st.sampled_from([0.0, 273.15, -40.5, 1e5]))
    if dtype.kind == "i" and dtype.itemsize <= 2 and draw(st.booleans()):
        attributes["_Unsigned"] = "true"
        attributes.pop("missing_value", None)  # xarray reads it unsigned-blind; kept simple
    return stored, attributes, draw(st.sampled_from([2, 3]))


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(encoding=_encodings())
def test_drawn_encodings_decode_as_xarray_shows_them(
    tmp_path: Path, encoding: tuple[np.ndarray, dict[str, Any], int]
) -> None:
    stored, attributes, zarr_format = encoding
    fill = attributes.pop("_FillValue", None) if zarr_format == 2 else None
    url = write_attributes(
        tmp_path / "s.zarr", stored, attributes, zarr_format=zarr_format, fill_value=fill
    )
    _same(_decoded(url), _xarray(url))


@settings(
    max_examples=examples(60),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    encoding=_encodings(),
    cast=st.sampled_from([None, "float32", "float16", "float64"]),
    slab_values=st.integers(1, 100),
)
def test_drawn_encodings_cast_in_slabs_equal_xarrays_values_cast(
    tmp_path: Path,
    encoding: tuple[np.ndarray, dict[str, Any], int],
    cast: str | None,
    slab_values: int,
) -> None:
    """The host kernel decodes in slabs (`slab_values` of them, the last one short when
    it does not divide the 96 values), with or without a cast, some holding the drawn
    fill value and some not: every slab boundary gives the values
    `xr.open_zarr(p)[v].astype(cast)` gives, bit for bit, NaN where xarray shows NaN."""
    stored, attributes, zarr_format = encoding
    fill = attributes.pop("_FillValue", None) if zarr_format == 2 else None
    url = write_attributes(
        tmp_path / "s.zarr", stored, attributes, zarr_format=zarr_format, fill_value=fill
    )
    decoding = read_cf_decoding("v", zarr.open_group(url, mode="r")["v"])
    shown = _xarray(url)
    expected = shown if cast is None else shown.astype(cast)
    got = decode_values(stored, decoding, cast, slab_values=slab_values)
    _same(got, expected)
    # a strided view (a field cut out of a wider batch) decodes to the same values
    _same(decode_values(stored[:, ::2], decoding, cast, slab_values=slab_values), expected[:, ::2])


@pytest.mark.parametrize("cast", ["float32", "bfloat16", "float16"])
def test_a_cast_equals_xarrays_values_cast(tmp_path: Path, cast: str) -> None:
    url = write_encoded(tmp_path / "s.zarr", "int16_packed_fill", zarr_format=3)
    array = zarr.open_group(url, mode="r")["v"]
    decoding = read_cf_decoding("v", array)
    got = decode_tensor(torch.from_numpy(array[...]), decoding, cast)
    expected = torch.from_numpy(_xarray(url)).to(getattr(torch, cast))
    assert got.dtype == expected.dtype
    assert torch.equal(got.nan_to_num(-1.0), expected.nan_to_num(-1.0))


def test_casts_are_floats_only() -> None:
    assert check_cast_dtype("bfloat16") == "bfloat16"
    with pytest.raises(ValueError, match=r"dtype='int32': batches are cast to floats only"):
        check_cast_dtype("int32")


def test_masked_integers_that_stay_integers_are_refused() -> None:
    with pytest.raises(ValueError, match="hold no NaN"):
        cf_decoding("int16", fill_values=[-1], scale_factor=2)


class _Once:
    """A source of one item, standing for the stages before the decoding node."""

    def __init__(self, item: Any) -> None:
        self.item = item
        self.loaded: Any = "never"

    def reset(self, initial_state: Any = None) -> None:
        self.loaded = initial_state

    def state_dict(self) -> dict[str, Any]:
        return {"source": "state"}

    def __next__(self) -> Any:
        return self.item


def test_the_node_decodes_host_batches_in_place_and_keeps_no_state() -> None:
    decoding = cf_decoding("int16", fill_values=[-1], scale_factor=0.5, add_offset=1.0)
    stored = np.array([[-1, 2], [4, 6]], dtype=np.int16)
    source = _Once(Batch({"v": stored, "sample_index": np.arange(2)}))
    node = CFDecodeNode(source, {"v": decoding})  # type: ignore[arg-type]
    node.reset({"source": "state"})
    assert source.loaded == {"source": "state"}  # its state is its source's, as it is
    batch = next(node)
    assert isinstance(batch, Batch) and isinstance(batch["v"], np.ndarray)
    _same(batch["v"], np.array([[np.nan, 2.0], [3.0, 4.0]]))
    assert stored[0, 0] == -1  # the stored buffer is never written
    assert node.state_dict() == {"source": "state"}


@pytest.mark.parametrize(
    "attributes",
    [
        {"add_offset": 1.5},
        {"scale_factor": 2.0},
        {"fill_values": [4.0]},
        {"fill_values": [4.0], "scale_factor": 0.5, "add_offset": -1.0},
    ],
)
def test_decoding_in_place_never_writes_the_stored_values(attributes: dict[str, Any]) -> None:
    """float64 stored values decode to float64: the decoded tensor starts as the stored
    one, and is copied before the in-place steps write it (both kernels)."""
    decoding = cf_decoding("float64", **attributes)
    assert decoding.decoded_dtype == "float64"
    stored = np.arange(8.0).reshape(2, 4)
    expected = stored.copy()
    tensor = torch.from_numpy(stored)
    decoded = decode_tensor(tensor, decoding, None)
    assert not np.array_equal(decoded.numpy(), expected, equal_nan=True)
    _same(decode_values(stored, decoding), decoded.numpy())
    _same(stored, expected)


@pytest.mark.parametrize(
    ("dtype", "attributes"),
    [
        ("int16", {"scale_factor": 0.002, "add_offset": 273.15, "_FillValue": -32767}),
        ("int16", {"scale_factor": 1.5e-4, "_FillValue": -1, "_Unsigned": "true"}),
        ("uint8", {"scale_factor": 0.4, "add_offset": -40.5, "_FillValue": 255}),
        ("int16", {"_FillValue": 0}),
    ],
)
@pytest.mark.parametrize("cast", ["float32", "float16"])
def test_every_narrow_stored_value_cast_equals_xarrays(
    tmp_path: Path, dtype: str, attributes: dict[str, Any], cast: str
) -> None:
    """A cast of 8- and 16-bit integers is looked up in a table of every stored value
    decoded: each of those values, stored, gives xarray's value cast, NaN where it masks."""
    info = np.iinfo(dtype)
    stored = np.arange(info.min, info.max + 1).astype(dtype).reshape(-1, 4, 4)
    url = write_attributes(tmp_path / "s.zarr", stored, attributes, zarr_format=3)
    decoding = read_cf_decoding("v", zarr.open_group(url, mode="r")["v"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # float16 overflows, as astype does
        expected = _xarray(url).astype(cast)
        got = decode_values(stored, decoding, cast)
    assert np.isnan(expected).sum() == 1
    _same(got, expected)
    _same(decode_values(stored[::-1], decoding, cast), expected[::-1])


@pytest.mark.parametrize(
    ("dtype", "zarr_format", "attributes"),
    [
        ("int16", 3, {"_FillValue": -7, "scale_factor": 0.5, "add_offset": 10.0}),
        ("int16", 2, {"scale_factor": 0.002, "add_offset": 273.15}),
        ("uint16", 3, {"_FillValue": 9, "missing_value": 3}),
        ("float32", 2, {}),
    ],
)
@pytest.mark.parametrize("cast", [None, "float32", "float16"])
def test_slabs_with_and_without_masked_values_decode_as_xarray(
    tmp_path: Path, dtype: str, zarr_format: int, attributes: dict[str, Any], cast: str | None
) -> None:
    """Values are decoded slab by slab, and a slab with no masked value skips the masked
    write: masked values on a slab's first and last value, slabs without any between
    and after them, and a short last slab with masked values at both its ends all give
    xarray's values (cast as `.astype` casts them), NaN where xarray shows NaN."""
    slab = 8
    stored = (np.arange(5 * 3 * 4) % 50 + 20).astype(dtype).reshape(5, 3, 4)  # 60 values
    masked = attributes.get("_FillValue", -7 if dtype != "uint16" else 9)
    flat = stored.reshape(-1)
    flat[[8, 15, 56, 59]] = masked  # the second slab's ends, the short last slab's ends
    if dtype == "uint16":
        flat[[24, 31]] = 3  # the missing_value, on the fourth slab's ends
    fill = None if zarr_format == 3 else masked
    url = write_attributes(
        tmp_path / "s.zarr", stored, attributes, zarr_format=zarr_format, fill_value=fill
    )
    decoding = read_cf_decoding("v", zarr.open_group(url, mode="r")["v"])
    shown = _xarray(url)
    assert np.isnan(shown).sum() == (6 if dtype == "uint16" else 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a table's float16 overflows
        expected = shown if cast is None else shown.astype(cast)
        _same(decode_values(stored, decoding, cast, slab_values=slab), expected)
        _same(decode_values(stored, decoding, cast, slab_values=flat.size), expected)


@pytest.mark.parametrize("cast", [None, "float16"])
def test_decoding_scratch_stays_a_slab_whatever_the_field(cast: str | None) -> None:
    """Beside its output, the host kernel allocates a slab's scratch (booleans for the
    mask, float64 before a cast), never arrays of the whole field: a batch of a megabyte
    of stored values decodes in its output and at most a slab's worth more."""
    stored = (np.arange(1 << 20, dtype=np.int32) % 50_000).reshape(16, 256, 256)
    stored[:, 0, :] = -1  # masked values in every sample
    decoding = cf_decoding("int32", fill_values=[-1, 7], scale_factor=0.5, add_offset=2.0)
    slab = 1 << 12
    tracemalloc.start()
    try:
        decoded = decode_values(stored, decoding, cast, slab_values=slab)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    expected = stored * 0.5 + 2.0
    expected[(stored == -1) | (stored == 7)] = np.nan
    _same(decoded, expected if cast is None else expected.astype(cast))
    scratch = slab * (1 + 1 + 8)  # the mask, a second masked value's comparison, a slab
    assert peak - decoded.nbytes <= scratch + (64 << 10)
