"""Everything that differs between zarr 3.1 and 3.4, in one place.

Only this module touches zarr internals that moved between releases; each helper says
which difference it hides. Tested on the zarr the CI installs (3.1 on Python 3.11) and by
hand on 3.4 (Python 3.12).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def plain_value(value: Any) -> Any:
    """Enum members in 3.1 (`Endian.little`, `BloscCname.lz4`) are plain strings in 3.4."""
    return getattr(value, "value", value)


def native_dtype(metadata: Any) -> np.dtype[Any]:
    """The numpy dtype of stored elements: `metadata.dtype` is a zarr ZDType from 3.1 on."""
    dtype = metadata.dtype
    to_native = getattr(dtype, "to_native_dtype", None)
    return np.dtype(to_native() if to_native is not None else dtype)


def chunk_key(metadata: Any, prefix: str, coords: tuple[int, ...]) -> str:
    """Store key of chunk `coords` of the array stored under `prefix`."""
    key = metadata.encode_chunk_key(coords)
    return f"{prefix}/{key}" if prefix else key


def fill_scalar(metadata: Any, dtype: np.dtype[Any]) -> Any:
    """The value a missing chunk reads as (zarr 2 arrays may record none: zeros)."""
    fill = metadata.fill_value
    return np.zeros((), dtype=dtype)[()] if fill is None else fill
