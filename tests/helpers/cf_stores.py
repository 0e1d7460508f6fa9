"""Stores whose variables are CF-encoded, as real archives write them: by xarray's
`to_zarr` from float values and an encoding (ERA5's int16 packing, satellite uint8 and
uint16, CMIP6's float32 fill of 1e20, `missing_value`, `_Unsigned`), and by zarr-python
with the attributes set by hand (a `missing_value` that differs from `_FillValue`, which
xarray will not write).

Each case is (values, encoding); `write_encoded` writes one as variable `v` of shape
(STEPS, 3, 4) with a time coordinate. Every packed case's values hold NaN, so its fill
value is stored, and xarray shows it as NaN.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import zarr

from tests.helpers.time_stores import hourly

STEPS = 24
SHAPE = (STEPS, 3, 4)


def _values(seed: int = 0) -> np.ndarray:
    values = np.random.default_rng(seed).uniform(250.0, 300.0, size=SHAPE)
    values[0, 0, :2] = np.nan
    values[STEPS - 1, 2, 3] = np.nan
    return values


_BASE = _values()
_WHOLE = np.nan_to_num(_BASE, nan=260.0)

CASES: dict[str, tuple[np.ndarray, dict[str, Any]]] = {
    "int16_packed_fill": (
        _BASE,
        {"dtype": "int16", "scale_factor": 0.01, "add_offset": 273.15, "_FillValue": -32767},
    ),
    "int16_packed": (
        _WHOLE,
        {"dtype": "int16", "scale_factor": 0.01, "add_offset": 273.15, "_FillValue": None},
    ),
    "int8_packed_fill": (
        _BASE,
        {"dtype": "int8", "scale_factor": 0.5, "add_offset": 275.0, "_FillValue": -128},
    ),
    "uint8_packed_fill": (
        _BASE,
        {"dtype": "uint8", "scale_factor": 0.25, "add_offset": 250.0, "_FillValue": 255},
    ),
    "uint8_packed": (
        _WHOLE,
        {"dtype": "uint8", "scale_factor": 0.25, "add_offset": 250.0, "_FillValue": None},
    ),
    "uint16_packed_fill": (
        _BASE,
        {"dtype": "uint16", "scale_factor": 0.001, "add_offset": 250.0, "_FillValue": 65535},
    ),
    "uint16_packed": (
        _WHOLE,
        {"dtype": "uint16", "scale_factor": 0.001, "add_offset": 250.0, "_FillValue": None},
    ),
    "int8_unsigned": (
        _BASE,
        {
            "dtype": "int8",
            "_Unsigned": "true",
            "scale_factor": 0.25,
            "add_offset": 250.0,
            "_FillValue": -1,
        },
    ),
    "int16_masked": (np.round(_BASE), {"dtype": "int16", "_FillValue": -999}),
    "float32_fill_finite": (_BASE.astype("float32"), {"_FillValue": -9999.0}),
    "float32_fill_1e20": (_BASE.astype("float32"), {"_FillValue": 1e20}),
    "float32_fill_nan": (_BASE.astype("float32"), {}),
    "float64_missing_value": (_BASE, {"missing_value": -9999.0, "_FillValue": None}),
}


def write_encoded(
    path: Path, case: str, *, zarr_format: int, consolidated: bool = False, steps_per_chunk: int = 4
) -> str:
    """Case `case` written by `xr.Dataset.to_zarr` as variable `v`; its URL.

    Args:
        path: where to write the store.
        case: a key of `CASES`.
        zarr_format: 2 or 3.
        consolidated: whether the metadata is consolidated.
        steps_per_chunk: the chunk length along time.
    """
    import xarray as xr

    values, encoding = CASES[case]
    ds = xr.Dataset(
        {"v": (("time", "lat", "lon"), values.copy())},
        coords={"time": hourly("2000-01-01", STEPS)},
    )
    encoding = {**encoding, "chunks": (steps_per_chunk, *SHAPE[1:])}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "saving variable")  # packed without a fill: no NaN
        warnings.filterwarnings("ignore", "Consolidated metadata")  # v3: zarr's own note
        ds.to_zarr(
            str(path), zarr_format=zarr_format, encoding={"v": encoding}, consolidated=consolidated
        )
    return str(path)


def write_attributes(
    path: Path,
    stored: np.ndarray,
    attributes: dict[str, Any],
    *,
    zarr_format: int,
    fill_value: Any = None,
    named: bool = True,
    name: str = "v",
) -> str:
    """`stored` (time first) written by zarr-python as array `name`, with `attributes` as
    its attributes, and a CF time coordinate; its URL.

    Args:
        path: where to write the store.
        stored: the stored values, of the stored dtype.
        attributes: the array's attributes (`_FillValue`, `missing_value`, ...).
        zarr_format: 2 or 3.
        fill_value: the array's zarr `fill_value` (None: zarr-python's default).
        named: whether the array names its dimensions (`_ARRAY_DIMENSIONS` in v2,
            `dimension_names` in v3); xarray opens only stores whose arrays do.
        name: the array's name.
    """
    group = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    dims = ("time", "lat", "lon")[: stored.ndim]
    naming: dict[str, Any] = {}
    if named and zarr_format == 3:
        naming["dimension_names"] = dims
    array = group.create_array(
        name,
        shape=stored.shape,
        chunks=(4, *stored.shape[1:]),
        dtype=stored.dtype,
        fill_value=fill_value,
        **naming,
    )
    array[...] = stored
    extra = {"_ARRAY_DIMENSIONS": list(dims)} if named and zarr_format == 2 else {}
    array.attrs.update({**attributes, **extra})
    hours = np.arange(stored.shape[0], dtype=np.int64)
    time = group.create_array(
        "time",
        data=hours,
        **({"dimension_names": ("time",)} if zarr_format == 3 else {}),
    )
    time.attrs.update(
        {
            "units": "hours since 2000-01-01",
            **({"_ARRAY_DIMENSIONS": ["time"]} if zarr_format == 2 else {}),
        }
    )
    return str(path)
