"""Open a store's root group and describe the selected arrays for the pure core."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
import obstore.exceptions
import obstore.store
import zarr
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import ObjectStore

from insitubatch_nodes.core.channels import DEFAULT_SPATIAL_DIMS
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.io.metadata.array_metadata import check_torch_dtypes
from insitubatch_nodes.io.metadata.cf_attributes import other_decoding
from insitubatch_nodes.io.metadata.time_dimension import (
    check_static_grid,
    has_time,
    named_time,
    static_variables,
    time_dimension,
)
from insitubatch_nodes.io.metadata.zarr_compat import run_on_zarr_loop
from insitubatch_nodes.io.stores.redact import raise_scrubbed, redact, scrubbed
from insitubatch_nodes.io.stores.store_errors import (
    explain_list_failure,
    explain_missing_bucket,
    explain_open_failure,
)


def open_root_group(store: Store, where: str, secrets: Iterable[str] = ()) -> zarr.Group:
    """The root group of `store`, or an error that says what is wrong with the URL, the
    bucket or the credentials.

    The errors, and the causes chained under them, are redacted: obstore's text echoes
    request URLs and zarr's quotes `repr(store)`.

    Args:
        store: the opened store (`io.stores.open_store.open_store`).
        where: the store's description for messages (`io.stores.open_store.describe`).
        secrets: values known to be secret (`redact.secrets_in` of the URL and the
            storage_options), kept out of every message.
    """
    try:
        return zarr.open_group(store, mode="r")
    except json.JSONDecodeError as err:
        raise invalid_metadata(store, where, err, secrets) from None
    except obstore.exceptions.BaseError as err:
        clearer = explain_open_failure(err, where, secrets)
        if clearer is None:
            raise_scrubbed(err, secrets)
        raise clearer from scrubbed(err, secrets)
    except (FileNotFoundError, zarr.errors.BaseZarrError) as err:
        if isinstance(store, ObjectStore) and not isinstance(
            store.store, obstore.store.LocalStore | obstore.store.MemoryStore
        ):
            no_bucket = explain_missing_bucket(store.store, where, secrets)
            if no_bucket is not None:
                raise no_bucket from scrubbed(err, secrets)
        raise ValueError(
            redact(
                f"{where} is not a Zarr group (no zarr.json or .zgroup at its root): point "
                f"the loader at the group that holds your arrays",
                secrets,
            )
        ) from scrubbed(err, secrets)


# Where zarr keeps metadata: v3 `zarr.json`; v2 `.zgroup`, `.zarray`, `.zattrs`, and
# consolidated `.zmetadata`.
_METADATA_FILES = ("zarr.json", ".zgroup", ".zarray", ".zattrs", ".zmetadata")


async def _first_invalid_json(store: Store) -> tuple[str, json.JSONDecodeError] | None:
    """The first metadata file at the group's root or one level below (its arrays) that
    is not valid JSON, and the parser's error."""
    prototype = default_buffer_prototype()
    children = sorted([name async for name in store.list_dir("")])
    for prefix in ["", *(c for c in children if c not in _METADATA_FILES)]:
        for name in _METADATA_FILES:
            key = f"{prefix}/{name}" if prefix else name
            try:
                found = await store.get(key, prototype)
            except OSError:  # a file where a directory would be, on some local stores
                continue
            if found is None:
                continue
            try:
                json.loads(found.to_bytes())
            except json.JSONDecodeError as err:
                return key, err
    return None


def invalid_metadata(
    store: Store, where: str, err: json.JSONDecodeError, secrets: Iterable[str] = ()
) -> ValueError:
    """zarr's JSON error names no file: the error naming the metadata file at fault.

    Args:
        store: the opened store.
        where: the store's description for messages (`io.stores.open_store.describe`).
        err: the parse error zarr raised.
        secrets: values known to be secret (`redact.secrets_in`), kept out of the message.
    """
    try:
        found = run_on_zarr_loop(_first_invalid_json(store))
    except Exception:
        found = None
    key, parsed = found if found is not None else ("a metadata file", err)
    at = f"{parsed.msg} at line {parsed.lineno}, column {parsed.colno}"
    name = repr(key) if found is not None else key
    return ValueError(
        redact(
            f"{name} in {where} is not valid JSON ({at}): a metadata file damaged or edited "
            f"by hand; fix it, or restore it from a good copy",
            secrets,
        )
    )


def arrays_of(group: zarr.Group, where: str, secrets: Iterable[str] = ()) -> dict[str, zarr.Array]:
    """The arrays in `group` by name, or an error that says why they cannot be listed.

    Listing is a request of its own (unless the metadata is consolidated) and fails on its
    own: a plain HTTP server does not answer it, and obstore's error echoes the URL, whose
    credentials must stay out of the message.

    Args:
        group: the root group (`open_root_group`).
        where: the store's description for messages (`io.stores.open_store.describe`).
        secrets: values known to be secret (`redact.secrets_in`), kept out of every message.
    """
    try:
        return dict(group.arrays())
    except json.JSONDecodeError as err:
        raise invalid_metadata(group.store, where, err, secrets) from None
    except obstore.exceptions.BaseError as err:
        store = group.store
        http = isinstance(store, ObjectStore) and isinstance(store.store, obstore.store.HTTPStore)
        clearer = explain_list_failure(err, where, http, secrets)
        if clearer is None:
            raise_scrubbed(err, secrets)
        raise clearer from scrubbed(err, secrets)


def layout_of(array: zarr.Array) -> VariableLayout:
    """Shape, inner chunk shape (for sharded arrays too) and numpy dtype name.

    The dtype is in native byte order: block buffers and batches are what torch can wrap,
    whatever byte order the store keeps (Zarr v2 `>f4`); decoding swaps bytes on the way.
    """
    dtype = np.dtype(array.dtype).newbyteorder("=")
    return VariableLayout(tuple(array.shape), tuple(array.chunks), str(dtype))


class Selection(NamedTuple):
    """The selected arrays, by kind.

    Args:
        fields: the time-varying variables' layouts, in order.
        statics: the static fields' layouts (no time dimension), in order.
        statics_left_out: static fields the default choice of variables left out.
    """

    fields: dict[str, VariableLayout]
    statics: dict[str, VariableLayout]
    statics_left_out: tuple[str, ...] = ()


def select_variables(
    arrays: Mapping[str, zarr.Array],
    variables: Sequence[str] | None,
    where: str,
    spatial_dims: int = DEFAULT_SPATIAL_DIMS,
) -> Selection:
    """Layouts of the named arrays, or by default of every array with >= 2 dims.

    The default skips 1-D coordinate arrays (latitude, time, ...) that xarray writes next
    to the data and the static fields (arrays that name dimensions without time:
    `io.metadata.time_dimension`; named, they are read), and refuses to guess when the
    remaining arrays disagree on axis 0. A named array without time is a static field,
    refused unless it is the fields' grid (`check_static_grid`); one with time not first
    is refused by name (it would be read as if its first axis were time); so is one whose
    values torch cannot hold, here, before any read.

    Args:
        arrays: the group's arrays by name (`arrays_of`).
        variables: the arrays to load, or None for the default choice.
        where: the store's description for messages (`io.stores.open_store.describe`).
        spatial_dims: the trailing grid axes a static field must match.
    """
    chosen, left_out = _chosen_arrays(arrays, variables, where)
    check_torch_dtypes(chosen)
    statics = static_variables(arrays, list(chosen))
    fields = [n for n in chosen if n not in statics]
    check_static_grid(arrays, statics, fields, spatial_dims)
    return Selection(
        {name: layout_of(chosen[name]) for name in fields},
        {name: layout_of(chosen[name]) for name in statics},
        left_out,
    )


def _chosen_arrays(
    arrays: Mapping[str, zarr.Array], variables: Sequence[str] | None, where: str
) -> tuple[dict[str, zarr.Array], tuple[str, ...]]:
    if variables is None:
        chosen = {n: a for n, a in sorted(arrays.items()) if a.ndim >= 2}
        time = named_time(arrays, list(chosen))  # static fields left out, as coordinates are
        left_out = tuple(n for n in chosen if not has_time(arrays, n, time))
        chosen = {n: a for n, a in chosen.items() if n not in left_out}
        # dates, durations and booleans xarray decodes are left out, as coordinates are
        chosen = {n: a for n, a in chosen.items() if other_decoding(a) is None}
        if not chosen:
            raise ValueError(
                f"{where} has no array with 2 or more dimensions to load; found "
                f"{sorted(arrays)}: name the arrays with variables=[...]"
            )
        time_dimension(arrays, list(chosen))  # time first in each, by name (else refused)
        lengths = Counter(a.shape[0] for a in chosen.values())
        if len(lengths) > 1:
            raise ValueError(
                f"the arrays in {where} differ in length along axis 0 ("
                + ", ".join(f"{n}={a.shape[0]}" for n, a in chosen.items())
                + "); choose the ones that share a sample axis with variables=[...]"
            )
        return chosen, left_out
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
    statics = static_variables(arrays, variables)
    time_dimension(arrays, [n for n in variables if n not in statics])
    return {n: arrays[n] for n in variables}, ()
