"""What an opened zarr array's metadata says beyond its layout: its codecs in a few words,
and whether torch can hold its values at all.

Both are read when a loader is built. The codecs and the fill value go into the
fingerprint a state records (`core.fingerprint`): rewriting a store with another
compressor or fill value makes it another store.
The dtype check refuses, before any read, what torch has no dtype for (dates, strings,
Python objects): otherwise the first batch would fail deep in the device copy, after a
whole block was read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import zarr


def _chain(codecs: Sequence[Mapping[str, Any]]) -> str:
    """Codec names joined by "+", a sharding codec's inner chain in brackets."""
    parts = []
    for codec in codecs:
        inner = (codec.get("configuration") or {}).get("codecs")
        parts.append(f"{codec['name']}({_chain(inner)})" if inner else str(codec["name"]))
    return "+".join(parts)


def codec_summary(array: zarr.Array) -> str:
    """The codec chain of `array` by name (v3 `codecs`, a shard's inner chain in brackets;
    v2 `filters` then `compressor`), e.g. "bytes+zstd". Names only: settings (level,
    shuffle, block size) change how bytes are stored, not the values read, and how zarr
    writes them out differs between releases, so a state stays valid across an upgrade.

    Args:
        array: an opened zarr array.
    """
    metadata = array.metadata.to_dict()
    if "codecs" in metadata:
        return _chain(list(metadata["codecs"] or ())) or "none"
    codecs = [*(metadata.get("filters") or ()), metadata.get("compressor")]
    return "+".join(str(c["id"]) for c in codecs if c is not None) or "none"


def fill_value_text(array: zarr.Array) -> str:
    """What a never-written chunk of `array` reads as, as text: it is part of the data
    (rewriting an array with another fill value changes what missing chunks read as).

    Args:
        array: an opened zarr array.
    """
    fill = array.metadata.fill_value
    try:
        return repr(np.asarray(fill).item())
    except (TypeError, ValueError):
        return repr(fill)


def _torch_can_hold(dtype: Any) -> bool:
    """Whether torch has a dtype for these values, in native byte order (big-endian
    stores are swapped as they are decoded)."""
    try:
        native = np.dtype(dtype).newbyteorder("=")
        torch.from_numpy(np.zeros(0, dtype=native))
    except (TypeError, ValueError):
        return False
    return True


def check_torch_dtypes(arrays: Mapping[str, zarr.Array]) -> None:
    """Refuse the first array whose values torch has no dtype for.

    Args:
        arrays: the variables the loader is to read, by name.

    Raises:
        TypeError: a variable's dtype is one torch cannot hold (dates, strings, objects).
    """
    for name, array in arrays.items():
        if _torch_can_hold(array.dtype):
            continue
        raise TypeError(
            f"variable {name!r} has dtype {array.dtype}, which torch cannot hold (it takes "
            f"bool, integers, floats and complex); leave it out with variables=[...], or "
            f"cast it to a numeric dtype in the store (e.g. dates as int64 seconds)"
        )
