"""An array's CF encoding attributes, read as `xr.open_zarr` reads them, into a
`core.cf_decoding.CFDecoding`.

Where the mask comes from differs between Zarr formats, as in xarray:

- Zarr v2: the array's `fill_value` is the `_FillValue` (xarray writes it there), so a
  `fill_value` of 0, zarr-python's default for v2 arrays, masks every stored 0. xarray
  does the same, and users are often surprised: `zero_fill_warning` says so.
- Zarr v3: the `_FillValue` attribute is the mask (base64 of the little-endian float64
  for floats, as xarray writes it; a plain number for integers), and the array's
  `fill_value` only says what unwritten chunks hold.
- `use_zarr_fill_value_as_mask=True` or `False` picks one of the two for either format,
  as `xr.open_zarr` takes it; None (the default) picks by format.
- An array that names no dimensions (no `_ARRAY_DIMENSIONS` in v2, no `dimension_names`
  in v3), which xarray cannot open, is decoded from its attributes only: its zarr
  `fill_value` masks nothing.

`missing_value`, `_Unsigned`, `scale_factor` and `add_offset` are attributes in both
formats. An attribute that is not a number is refused here, naming the array.

xarray decodes more than masks and packing by default: a variable whose `units` read
"<unit> since <date>" is shown as dates, one whose `dtype` attribute names timedelta64 as
durations, and an integer one whose `dtype` attribute is "bool" (netCDF's way to store
booleans) as booleans. The loader yields numbers, not those, so such a variable is
refused by name when asked for (`other_decoding`), and left out of the default choice of
variables as a coordinate is.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping
from typing import Any

import numpy as np
import zarr

from insitubatch_nodes.core.cf_decoding import CFDecoding, Number, cf_decoding, stored_values
from insitubatch_nodes.core.cf_time import SINCE
from insitubatch_nodes.io.metadata.dimensions import dimension_names

FILL_VALUE = "_FillValue"
MISSING_VALUE = "missing_value"
UNSIGNED = "_Unsigned"
SCALE_FACTOR = "scale_factor"
ADD_OFFSET = "add_offset"
CF_ATTRIBUTES = (FILL_VALUE, MISSING_VALUE, UNSIGNED, SCALE_FACTOR, ADD_OFFSET)
UNITS = "units"
DTYPE = "dtype"


def other_decoding(array: zarr.Array) -> str | None:
    """What `xr.open_zarr` shows `array`'s values as, when that is not numbers the loader
    can yield (dates, durations, booleans stored as integers; see the module), else None.

    Args:
        array: an opened zarr array.
    """
    attributes = array.attrs.asdict()
    units, dtype = attributes.get(UNITS), attributes.get(DTYPE)
    if isinstance(units, str) and SINCE.match(units) is not None:  # as time coordinates
        return f"dates (its units are {units!r})"
    if isinstance(dtype, str) and dtype.startswith("timedelta64"):
        return f"durations (its dtype attribute is {dtype!r})"
    if dtype == "bool" and np.dtype(array.dtype).kind in "iu":
        return "booleans (its dtype attribute is 'bool')"
    return None


def uses_fill_value_as_mask(array: zarr.Array, use_zarr_fill_value_as_mask: bool | None) -> bool:
    """Whether the array's zarr `fill_value` is its `_FillValue` (see the module).

    Args:
        array: an opened zarr array.
        use_zarr_fill_value_as_mask: as `xr.open_zarr` takes it; None picks by format.
    """
    if dimension_names(array) is None:
        return False
    if use_zarr_fill_value_as_mask is None:
        return bool(array.metadata.zarr_format == 2)
    return use_zarr_fill_value_as_mask


def read_cf_decoding(
    name: str,
    array: zarr.Array,
    *,
    decode_cf: bool = True,
    use_zarr_fill_value_as_mask: bool | None = None,
) -> CFDecoding:
    """How the loader decodes `array`'s stored values: as `xr.open_zarr` with the same
    options, or not at all with `decode_cf=False`.

    Args:
        name: the array's name, for messages.
        array: an opened zarr array.
        decode_cf: False keeps stored values (`xr.open_zarr(..., mask_and_scale=False)`).
        use_zarr_fill_value_as_mask: as `xr.open_zarr` takes it (see the module).

    Raises:
        ValueError: an encoding attribute is not a number, the attributes make a
            decoding xarray cannot make either, or xarray shows the values as something
            other than numbers (`other_decoding`).
    """
    dtype = np.dtype(array.dtype).newbyteorder("=")
    if not decode_cf:
        return stored_values(str(dtype))
    shown_as = other_decoding(array)
    if shown_as is not None:
        raise ValueError(
            f"variable {name!r} is shown by xr.open_zarr as {shown_as}, which the loader "
            f"does not yield: leave it out of variables=, or pass decode_cf=False for its "
            f"stored numbers"
        )
    attributes = array.attrs.asdict()
    fills: list[Number] | None
    if uses_fill_value_as_mask(array, use_zarr_fill_value_as_mask):
        fill = array.metadata.fill_value
        fills = None if fill is None else [_number(name, "fill_value", fill)]
        if fill is None and FILL_VALUE in attributes:
            fills = _fill_attribute(name, attributes[FILL_VALUE], dtype)
    elif FILL_VALUE in attributes:
        fills = _fill_attribute(name, attributes[FILL_VALUE], dtype)
    else:
        fills = None
    missing = None
    if MISSING_VALUE in attributes:
        missing = _numbers(name, MISSING_VALUE, attributes[MISSING_VALUE])
    unsigned = attributes.get(UNSIGNED)
    scale_factor = _packing(name, SCALE_FACTOR, attributes)
    add_offset = _packing(name, ADD_OFFSET, attributes)
    try:
        return cf_decoding(
            dtype,
            fill_values=fills,
            missing_values=missing,
            unsigned=str(unsigned) if unsigned is not None else None,
            scale_factor=scale_factor,
            add_offset=add_offset,
        )
    except ValueError as err:
        raise ValueError(
            f"variable {name!r}: {err}; fix its attributes, or pass decode_cf=False for "
            f"its stored values"
        ) from None


def zero_fill_warning(
    name: str,
    array: zarr.Array,
    decoding: CFDecoding,
    use_zarr_fill_value_as_mask: bool | None,
) -> str | None:
    """A warning when a Zarr v2 array's `fill_value` of 0 is its mask (see the module),
    else None.

    Args:
        name: the array's name.
        array: the opened array.
        decoding: how the loader decodes it (`read_cf_decoding`).
        use_zarr_fill_value_as_mask: the option it was read with.
    """
    if array.metadata.zarr_format != 2 or 0 not in decoding.masked:
        return None
    if not uses_fill_value_as_mask(array, use_zarr_fill_value_as_mask):
        return None
    fill = array.metadata.fill_value
    if fill is None or float(fill) != 0:
        return None
    return (
        f"variable {name!r} is a Zarr v2 array whose fill_value is 0, which xarray, and so "
        f"the loader, reads as its _FillValue: every stored 0 is NaN, as xr.open_zarr shows "
        f"it. If zeros are data, pass use_zarr_fill_value_as_mask=False (xr.open_zarr takes "
        f"the same), or decode_cf=False"
    )


def _number(name: str, attribute: str, value: Any) -> Number:
    """A numeric attribute value as a Python int or float, or an error naming it."""
    if isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    raise ValueError(
        f"variable {name!r} has {attribute}={value!r}, which is not a number: the loader "
        f"decodes CF attributes as xr.open_zarr does; fix the attribute, or pass "
        f"decode_cf=False for the stored values"
    )


def _numbers(name: str, attribute: str, value: Any) -> list[Number]:
    values = value if isinstance(value, list | tuple) else [value]
    return [_number(name, attribute, v) for v in values]


def _fill_attribute(name: str, value: Any, dtype: np.dtype[Any]) -> list[Number]:
    """The `_FillValue` attribute's value(s): for float arrays xarray writes the
    little-endian float64 in base64 (a number is taken as it is)."""
    if dtype.kind == "f" and isinstance(value, str):
        try:
            packed = base64.standard_b64decode(value.encode())
            return [float(struct.unpack("<d", packed)[0])]
        except (binascii.Error, struct.error):
            raise ValueError(
                f"variable {name!r} has _FillValue={value!r}, which is not a float written "
                f"as xarray writes one (base64 of 8 bytes) nor a number; fix the attribute, "
                f"or pass decode_cf=False for the stored values"
            ) from None
    return _numbers(name, FILL_VALUE, value)


def _packing(name: str, attribute: str, attributes: Mapping[str, Any]) -> Number | None:
    """`scale_factor` or `add_offset`, or None; a one-element list is its element (xarray
    takes it so)."""
    if attribute not in attributes:
        return None
    value = attributes[attribute]
    if isinstance(value, list | tuple) and len(value) == 1:
        value = value[0]
    return _number(name, attribute, value)
