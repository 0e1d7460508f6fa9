"""CF decoding: how one variable's stored values become the values `xr.open_zarr` shows.

xarray decodes by default (`mask_and_scale=True`), and so does the loader, by the same
rules, stated here once:

1. An integer array marked `_Unsigned="true"` holds unsigned integers of its width (and
   an unsigned one marked `"false"`, signed ones); the bits are the same, only their
   reading changes. A float array's `_Unsigned` is ignored.
2. Stored values equal to a `_FillValue` or a `missing_value` (either may list several;
   every one of them is masked when they differ) become NaN. A NaN fill masks nothing: a
   float NaN is NaN already. The `_FillValue` of an `_Unsigned` array is read the same
   way as the data; a `missing_value` is not (xarray leaves it as written).
3. Packed values are unpacked: `value * scale_factor + add_offset`, multiply then add.
4. `valid_range`, `valid_min` and `valid_max` are not applied (xarray does not).

The decoded dtype (`decoded_dtype`) follows from the packing attributes' types and the
stored width. Packed Zarr decodes to float64: Zarr's JSON keeps `scale_factor` as a
double, and xarray widens to the attributes' type. Masked but not packed: floats keep
their dtype, integers of 8 or 16 bits become float32 (which holds them exactly), wider
ones float64. `_Unsigned` alone only changes the integer type.

Masking compares stored values with the fills, never decoded ones, and a fill that no
stored value can equal exactly (1e20 on a float32 array whose values are float32, a
fraction on integers) is dropped here: xarray compares the widened values with the fill
as written, and a stored value equals it only if the fill is exactly one of the stored
type's values. So `CFDecoding.masked` holds values of the stored (reinterpreted) type,
and masking is one comparison per value on the stored array, before any cast.

Reading the attributes is `io.metadata.cf_attributes`'s; applying a decoding to batches
is `nodes.cf_decode`'s, and computing decoded values `core.decoded_values`'s. `record` is
the plain form that fingerprints and statistics keep, so that a state or a statistics
file made on other values is refused by name.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Number = int | float

# the keys of a record (`CFDecoding.record`), also read back from states and statistics
DTYPE_KEY = "dtype"
UNSIGNED_KEY = "unsigned"
MASKED_KEY = "masked"
SCALE_KEY = "scale_factor"
OFFSET_KEY = "add_offset"
YIELDS_KEY = "yields"

# dtypes a loader may cast its output to (`build_loader(dtype=...)`), by name
CAST_DTYPES = ("float16", "bfloat16", "float32", "float64")


@dataclass(frozen=True)
class CFDecoding:
    """How one variable's stored values are decoded (see the module); made by
    `cf_decoding`, or `stored_values` for none.

    Args:
        stored_dtype: the stored dtype (numpy name, native byte order).
        decoded_dtype: the dtype of the decoded values (numpy name).
        unsigned_as: the integer dtype the stored bits are read as (`_Unsigned`), or None.
        masked: the values, of the stored type as `unsigned_as` reads it, that become NaN.
        scale_factor: the factor packed values are multiplied by, or None.
        add_offset: the offset added after it, or None.
    """

    stored_dtype: str
    decoded_dtype: str
    unsigned_as: str | None = None
    masked: tuple[Number, ...] = ()
    scale_factor: Number | None = None
    add_offset: Number | None = None

    @property
    def changes_values(self) -> bool:
        """Whether decoding gives other values (or another dtype) than the stored ones."""
        return self.record() != stored_values(self.stored_dtype).record()

    @property
    def reads_dtype(self) -> str:
        """The dtype the stored bits are compared and widened as."""
        return self.unsigned_as or self.stored_dtype

    def record(self) -> dict[str, Any]:
        """The decoding as plain data (what fingerprints and statistics keep): the decoded
        dtype, and each step that applies."""
        entries: dict[str, Any] = {DTYPE_KEY: self.decoded_dtype}
        if self.unsigned_as is not None:
            entries[UNSIGNED_KEY] = self.unsigned_as
        if self.masked:
            entries[MASKED_KEY] = list(self.masked)
        if self.scale_factor is not None:
            entries[SCALE_KEY] = self.scale_factor
        if self.add_offset is not None:
            entries[OFFSET_KEY] = self.add_offset
        return entries


def stored_values(dtype: str) -> CFDecoding:
    """The decoding that keeps stored values as they are (`decode_cf=False`).

    Args:
        dtype: the stored dtype (numpy name).
    """
    return CFDecoding(stored_dtype=str(np.dtype(dtype)), decoded_dtype=str(np.dtype(dtype)))


def describe_record(record: Mapping[str, Any]) -> str:
    """A record (`CFDecoding.record`, perhaps with the dtype batches are cast to,
    `YIELDS_KEY`) in words, for messages: "int16 read as uint16, 65535 -> NaN, * 0.1 +
    273.15, as float64".

    Args:
        record: a decoding's record, from this loader or from a saved state.
    """
    steps = []
    if UNSIGNED_KEY in record:
        steps.append(f"read as {record[UNSIGNED_KEY]} (_Unsigned)")
    if MASKED_KEY in record:
        steps.append(", ".join(_number_text(v) for v in record[MASKED_KEY]) + " -> NaN")
    if SCALE_KEY in record:
        steps.append(f"* {_number_text(record[SCALE_KEY])}")
    if OFFSET_KEY in record:
        steps.append(f"+ {_number_text(record[OFFSET_KEY])}")
    dtype = record.get(DTYPE_KEY, "?")
    text = "stored values" if not steps else "decoded (" + ", ".join(steps) + ")"
    text += f" as {dtype}"
    yields = record.get(YIELDS_KEY, dtype)
    return text if yields == dtype else f"{text}, cast to {yields}"


def _number_text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def cf_decoding(
    stored_dtype: Any,
    *,
    fill_values: Sequence[Number] | None = None,
    missing_values: Sequence[Number] | None = None,
    unsigned: str | None = None,
    scale_factor: Number | None = None,
    add_offset: Number | None = None,
) -> CFDecoding:
    """The decoding xarray applies to a variable with these attributes (see the module).

    Args:
        stored_dtype: the stored dtype (numpy's, native byte order).
        fill_values: the `_FillValue` value(s) (NaN included), or None when absent.
        missing_values: the `missing_value` value(s), or None when absent.
        unsigned: the `_Unsigned` attribute ("true" or "false"), or None.
        scale_factor: the `scale_factor` attribute (an int or a float), or None.
        add_offset: the `add_offset` attribute (an int or a float), or None.

    Raises:
        ValueError: a decoding xarray cannot make either: masked values of a variable whose
            packing attributes are integers (its decoded dtype is an integer, no NaN).
    """
    stored = np.dtype(stored_dtype)
    reads = _unsigned_reading(stored, unsigned)
    fills = _kept_attribute(fill_values, stored)
    missing = _kept_attribute(missing_values, stored)
    if fills is not None and reads != stored:
        fills = [_reinterpreted(v, stored, reads) for v in fills]
    wanted = {v for v in [*(fills or ()), *(missing or ())] if not _is_nan(v)}
    packed = scale_factor is not None or add_offset is not None
    dtype = decoded_dtype(
        reads,
        masked=bool(wanted),
        fill_attribute=fills is not None or missing is not None,
        scale_factor=scale_factor,
        add_offset=add_offset,
    )
    if wanted and dtype.kind not in "fc":
        raise ValueError(
            f"values are masked (_FillValue/missing_value) but scale_factor={scale_factor!r} "
            f"and add_offset={add_offset!r} make the decoded values {dtype} integers, which "
            f"hold no NaN (xarray cannot decode them either)"
        )
    return CFDecoding(
        stored_dtype=str(stored),
        decoded_dtype=str(dtype),
        unsigned_as=None if reads == stored else str(reads),
        masked=_representable(wanted, reads),
        scale_factor=scale_factor if packed else None,
        add_offset=add_offset if packed else None,
    )


def decoded_dtype(
    reads: np.dtype[Any],
    *,
    masked: bool,
    fill_attribute: bool,
    scale_factor: Number | None,
    add_offset: Number | None,
) -> np.dtype[Any]:
    """The dtype xarray decodes to (see the module).

    Args:
        reads: the stored dtype as `_Unsigned` reads it.
        masked: whether some value is masked.
        fill_attribute: whether a `_FillValue` or `missing_value` is kept at all (a NaN
            fill of a float array is: then packing keeps the float's own dtype).
        scale_factor: the `scale_factor` attribute, or None.
        add_offset: the `add_offset` attribute, or None.
    """
    packed = scale_factor is not None or add_offset is not None
    dtype = reads
    if masked:
        dtype = _packed_float(reads, scale_factor, add_offset) if packed else _with_nan(reads)
    if packed and not fill_attribute:
        dtype = _packed_float(dtype, scale_factor, add_offset)
    return dtype


def _with_nan(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype that holds `dtype`'s values and NaN: floats keep theirs; integers of up
    to 16 bits fit float32 exactly, wider ones need float64."""
    if dtype.kind in "fc":
        return dtype
    return np.dtype(np.float32 if dtype.itemsize <= 2 else np.float64)


def _packed_float(
    dtype: np.dtype[Any], scale_factor: Number | None, add_offset: Number | None
) -> np.dtype[Any]:
    """The dtype packed values of `dtype` decode to, from the packing attributes' types:
    both of one float type give that type (float64 for 32-bit integers, whose values
    float32 cannot hold), an offset alone or of another type float64 (an offset loses
    precision where a factor does not), a factor alone its own type."""
    scale_type = None if scale_factor is None else np.asarray(scale_factor).dtype
    offset_type = None if add_offset is None else np.asarray(add_offset).dtype
    conforming = scale_type is not None and scale_type == offset_type
    if conforming and scale_type.kind == "f" and scale_type.itemsize >= 4:
        if dtype.kind in "iu" and dtype.itemsize == 4:
            return np.dtype(np.float64)
        return scale_type
    if offset_type is not None:
        return np.dtype(np.float64)
    assert scale_type is not None  # packed
    return scale_type


def _unsigned_reading(stored: np.dtype[Any], unsigned: str | None) -> np.dtype[Any]:
    if stored.kind == "i" and unsigned == "true":
        return np.dtype(f"u{stored.itemsize}")
    if stored.kind == "u" and unsigned == "false":
        return np.dtype(f"i{stored.itemsize}")
    return stored


def _is_nan(value: Number) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _kept_attribute(values: Sequence[Number] | None, stored: np.dtype[Any]) -> list[Number] | None:
    """An attribute's values, or None when absent, or dropped: one of only NaN on an
    integer array says nothing (xarray warns and drops it)."""
    if values is None:
        return None
    values = list(values)
    if stored.kind in "iu" and all(_is_nan(v) for v in values):
        return None
    return values


def _reinterpreted(value: Number, stored: np.dtype[Any], reads: np.dtype[Any]) -> Number:
    """A fill of the stored integer type, read as `reads` (the same bits)."""
    if _is_nan(value) or not float(value).is_integer():
        return value
    bits = 8 * stored.itemsize
    wrapped = int(value) % (1 << bits)  # its bits, whichever signedness it was written in
    if reads.kind == "i" and wrapped >= 1 << (bits - 1):
        return wrapped - (1 << bits)
    return wrapped


def _representable(values: Iterable[Number], dtype: np.dtype[Any]) -> tuple[Number, ...]:
    """The values a stored value of `dtype` can equal exactly, as that type's Python
    values, sorted (see the module: the others mask nothing)."""
    kept: set[Number] = set()
    for value in values:
        if dtype.kind in "iu":
            if float(value).is_integer():
                info = np.iinfo(dtype)
                number = int(value)
                if info.min <= number <= info.max:
                    kept.add(number)
        elif dtype.kind == "f":
            cast = np.asarray(value, dtype=np.float64).astype(dtype)
            if float(cast) == float(value):
                kept.add(float(value))
        elif dtype.kind == "b" and value in (0, 1):
            kept.add(int(value))
    return tuple(sorted(kept))


def check_cast_dtype(dtype: str | None) -> str | None:
    """`dtype` if batches may be cast to it (a float, `CAST_DTYPES`), else an error naming
    them.

    Args:
        dtype: a dtype's name, or None for no cast.
    """
    if dtype is None or dtype in CAST_DTYPES:
        return dtype
    raise ValueError(
        f"dtype={dtype!r}: batches are cast to floats only ({', '.join(CAST_DTYPES)}, as "
        f"torch dtypes or their names); leave dtype=None for the decoded values' own dtype"
    )


def promoted_dtype(dtypes: Iterable[str]) -> str:
    """The dtype one array of all of `dtypes` takes, as numpy promotes (float32 and
    float64 stacked are float64); `bfloat16` only with itself.

    Args:
        dtypes: dtype names.
    """
    names = sorted(set(dtypes))
    if len(names) == 1:
        return names[0]
    return str(np.result_type(*(np.dtype(n) for n in names)))
