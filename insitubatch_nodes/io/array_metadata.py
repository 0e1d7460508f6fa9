"""What an opened zarr array's metadata says beyond its layout: its codecs in a few words,
and whether torch can hold its values at all.

Both are read when a loader is built. The codecs go into the fingerprint a state records
(`core.fingerprint`): rewriting a store with another compressor makes it another store.
The dtype check refuses, before any read, what torch has no dtype for (dates, strings,
Python objects): otherwise the first batch would fail deep in the device copy, after a
whole block was read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import zarr

from insitubatch_nodes.core.fingerprint import short_form


def _codec_text(codec: Mapping[str, Any]) -> str:
    """`name(key=value, ...)` for a v3 codec (`name`, `configuration`) or a v2 numcodecs
    config (`id` and its settings)."""
    if "name" in codec:
        name, settings = codec["name"], dict(codec.get("configuration") or {})
    else:
        settings = dict(codec)
        name = settings.pop("id", "?")
    shown = ",".join(f"{key}={_value_text(value)}" for key, value in sorted(settings.items()))
    return f"{name}({shown})"


def _value_text(value: Any) -> str:
    """Scalars as they read (`little`, `0`, `False`), nested settings as compact JSON."""
    if isinstance(value, str | int | float | bool) or value is None:
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def codec_summary(array: zarr.Array) -> str:
    """The codec chain of `array` from its metadata (v3 `codecs`; v2 `filters` then
    `compressor`) in a short readable form, e.g. "bytes(endian=little)
    zstd(checksum=False,level=0)"; long chains (sharding) keep their start and a digest
    of the whole.

    Args:
        array: an opened zarr array.
    """
    metadata = array.metadata.to_dict()
    if "codecs" in metadata:
        codecs = list(metadata["codecs"] or ())
    else:
        codecs = [*(metadata.get("filters") or ()), metadata.get("compressor")]
    text = " ".join(_codec_text(c) for c in codecs if c is not None)
    return short_form(text or "none")


def _torch_can_hold(dtype: Any) -> bool:
    """Whether torch has a dtype for these values, in native byte order (big-endian
    stores are swapped as they are decoded)."""
    try:
        native = np.dtype(dtype).newbyteorder("=")
        torch.from_numpy(np.zeros(0, dtype=native))
    except (TypeError, ValueError):
        return False
    return True


def check_torch_dtypes(arrays: Mapping[str, zarr.Array], names: Sequence[str]) -> None:
    """Refuse the first of `names` whose values torch has no dtype for.

    Args:
        arrays: the group's arrays, by name.
        names: the variables the loader is to read (names not in `arrays` are skipped:
            the variable selection names those).

    Raises:
        TypeError: a variable's dtype is one torch cannot hold (dates, strings, objects).
    """
    for name in names:
        array = arrays.get(name)
        if array is None or _torch_can_hold(array.dtype):
            continue
        raise TypeError(
            f"variable {name!r} has dtype {array.dtype}, which torch cannot hold (it takes "
            f"bool, integers, floats and complex); leave it out with variables=[...], or "
            f"cast it to a numeric dtype in the store (e.g. dates as int64 seconds)"
        )
