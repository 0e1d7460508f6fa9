"""Dimension names and the coordinate arrays they point to, as xarray writes them.

xarray names each axis of an array: Zarr v3 keeps the names in the array's metadata
(`dimension_names`), Zarr v2 in its `_ARRAY_DIMENSIONS` attribute. A coordinate is the
1-D array named after its dimension ("time", "level"), beside the data. This is how the
loader finds the time axis of date splits and the level values of `levels=`, without
xarray installed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import zarr

from insitubatch_nodes.io.stores.redact import scrubbed
from insitubatch_nodes.io.stores.store_errors import first_line


def dimension_names(array: zarr.Array) -> tuple[str, ...] | None:
    """The array's dimension names: Zarr v3 `dimension_names`, else the
    `_ARRAY_DIMENSIONS` attribute xarray writes (Zarr v2); None when neither names all.

    Args:
        array: an opened zarr array.
    """
    names = getattr(array.metadata, "dimension_names", None)
    if names is None:
        names = array.attrs.get("_ARRAY_DIMENSIONS")
    if not isinstance(names, list | tuple) or len(names) != array.ndim:
        return None
    if any(not isinstance(n, str) for n in names):
        return None
    return tuple(names)


def axis_name(arrays: Mapping[str, zarr.Array], variables: list[str], axis: int) -> str | None:
    """The name the `variables` give their axis `axis`, when every one that names its
    axes gives the same; None when none names it.

    Args:
        arrays: the group's arrays by name.
        variables: the selected variables.
        axis: the axis (0 for time).
    """
    names = set()
    for name in variables:
        dims = dimension_names(arrays[name])
        if dims is not None and axis < len(dims):
            names.add(dims[axis])
    if len(names) > 1:
        raise ValueError(
            f"the selected variables name their axis {axis} differently ({sorted(names)}); "
            f"select variables that share it"
        )
    return names.pop() if names else None


def coordinate(arrays: Mapping[str, zarr.Array], name: str, length: int) -> zarr.Array | None:
    """The 1-D array `name` of `length` values (a dimension's coordinate), or None.

    Args:
        arrays: the group's arrays by name.
        name: the dimension's name.
        length: the dimension's length.
    """
    array = arrays.get(name)
    if array is None or array.ndim != 1 or array.shape[0] != length:
        return None
    return array


def coordinate_values(array: zarr.Array, where: str, secrets: Iterable[str] = ()) -> np.ndarray:
    """Every value of a coordinate (a time or level axis), read whole; a failed read is an
    `OSError` naming the coordinate and the store, with the credentials kept out of it and
    of its cause (obstore's text echoes request URLs, a password in an endpoint included).

    Args:
        array: the 1-D coordinate array.
        where: the store's description for messages (`io.stores.open_store.describe`).
        secrets: values known to be secret (`redact.secrets_in`), kept out of the message.
    """
    try:
        return np.asarray(array[...])
    except Exception as err:
        raise OSError(
            f"reading the coordinate {array.basename!r} of {where} failed: "
            f"{first_line(err, secrets)}; check that the store is reachable, then try again"
        ) from scrubbed(err, secrets)
