"""Open a store's root group and describe the selected arrays for the pure core."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np
import obstore.exceptions
import obstore.store
import zarr
from zarr.abc.store import Store
from zarr.storage import ObjectStore

from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.io.store_errors import explain_missing_bucket, explain_open_failure


def open_root_group(store: Store, where: str) -> zarr.Group:
    try:
        return zarr.open_group(store, mode="r")
    except obstore.exceptions.BaseError as err:
        clearer = explain_open_failure(err, where)
        if clearer is None:
            raise
        raise clearer from err
    except (FileNotFoundError, zarr.errors.BaseZarrError) as err:
        if isinstance(store, ObjectStore) and not isinstance(
            store.store, obstore.store.LocalStore | obstore.store.MemoryStore
        ):
            no_bucket = explain_missing_bucket(store.store, where)
            if no_bucket is not None:
                raise no_bucket from err
        raise ValueError(
            f"{where} is not a Zarr group (no zarr.json or .zgroup at its root): point the "
            f"loader at the group that holds your arrays"
        ) from err


def layout_of(array: zarr.Array) -> VariableLayout:
    """Shape, inner chunk shape (for sharded arrays too) and numpy dtype name.

    The dtype is in native byte order: block buffers and batches are what torch can wrap,
    whatever byte order the store keeps (Zarr v2 `>f4`); decoding swaps bytes on the way.
    """
    dtype = np.dtype(array.dtype).newbyteorder("=")
    return VariableLayout(tuple(array.shape), tuple(array.chunks), str(dtype))


def select_variables(
    group: zarr.Group, variables: Sequence[str] | None, where: str
) -> dict[str, VariableLayout]:
    """Layouts of the named arrays, or by default of every array with >= 2 dims.

    The default skips 1-D coordinate arrays (latitude, time, ...) that xarray writes next
    to the data, and refuses to guess when the remaining arrays disagree on axis 0.
    """
    arrays = {name: arr for name, arr in group.arrays()}
    if variables is None:
        chosen = {n: a for n, a in arrays.items() if a.ndim >= 2}
        if not chosen:
            raise ValueError(
                f"{where} has no array with 2 or more dimensions to load; found "
                f"{sorted(arrays)}: name the arrays with variables=[...]"
            )
        lengths = Counter(a.shape[0] for a in chosen.values())
        if len(lengths) > 1:
            raise ValueError(
                f"the arrays in {where} differ in length along axis 0 ("
                + ", ".join(f"{n}={a.shape[0]}" for n, a in sorted(chosen.items()))
                + "); choose the ones that share a sample axis with variables=[...]"
            )
        return {n: layout_of(a) for n, a in sorted(chosen.items())}
    if isinstance(variables, str):
        variables = [variables]
    seen: set[str] = set()
    for name in variables:
        if name in seen:
            raise ValueError(f"variables lists {name!r} twice; name each array once")
        seen.add(name)
    unknown = [n for n in variables if n not in arrays]
    if unknown:
        raise ValueError(
            f"unknown variable(s) {unknown} in {where}; its arrays are {sorted(arrays)}"
        )
    return {n: layout_of(arrays[n]) for n in variables}
