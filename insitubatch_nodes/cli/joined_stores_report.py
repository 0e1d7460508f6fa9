"""`insitubatch inspect` on a join, store by store: what each store gives the joined
source, along which time coordinate, what an inner join leaves out of it, and how many
steps one of its reads brings; a line of text each.

A store the loader reads nothing from still gets its line, so nothing given on the
command line disappears without a word: a store of static fields only joins by grid
alone, and the default choice of variables takes none of its fields (`--variables`
names them); a store none of whose arrays are selected is not read, and its dates are
not joined. A store of static fields only inspected by itself is said to be one: it
joins by grid alone, and nothing in it names time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import zarr
from zarr.abc.store import Store

from insitubatch_nodes.core.channels import DEFAULT_SPATIAL_DIMS
from insitubatch_nodes.io.joined_selection import is_timed
from insitubatch_nodes.io.joined_source import options_per_store, source_list
from insitubatch_nodes.io.metadata.dimensions import dimension_names
from insitubatch_nodes.io.metadata.time_axis import find_time_array
from insitubatch_nodes.io.metadata.time_dimension import named_time
from insitubatch_nodes.io.metadata.zarr_layout import arrays_of, open_root_group
from insitubatch_nodes.io.stores.open_store import describe, open_store
from insitubatch_nodes.io.stores.redact import secrets_in
from insitubatch_nodes.io.zarr_source import ZarrSource


@dataclass(frozen=True)
class JoinedStoreReport:
    """One store of a join, and what it gives the joined source.

    Args:
        store: the store, as messages name it (credentials redacted).
        zarr_format: 2 or 3.
        variables: the selected time-varying arrays it holds.
        statics: the selected static fields it holds.
        steps: its steps along time, or None for a store of static fields only (or one
            the loader does not read).
        origin: its step at which the joined time axis starts, or None.
        lost: its steps outside the joined axis (what `join="inner"` leaves out), or None.
        steps_per_chunk: the distinct steps per chunk of its variables: what one of its
            reads brings.
        time: the name of its own time coordinate (stores may name it differently:
            `time`, `valid_time`), or None for a store of static fields only.
        unread: for a store the loader reads nothing from, its arrays of two or more
            dimensions (what `--variables` could name); empty for a store it reads.
    """

    store: str
    zarr_format: int
    variables: tuple[str, ...]
    statics: tuple[str, ...]
    steps: int | None
    origin: int | None
    lost: int | None
    steps_per_chunk: tuple[int, ...]
    time: str | None = None
    unread: tuple[str, ...] = ()


@dataclass(frozen=True)
class OpenedStore:
    """A store `inspect` reads metadata and chunk sizes from: the one store, or one of a
    join's, with the arrays of the loader's it holds.

    Args:
        store: the opened store.
        where: the store as messages name it (credentials redacted).
        secrets: values known to be secret in its URL and options.
        arrays: its arrays by name.
        zarr_format: 2 or 3.
        fields: the selected time-varying variables it holds.
        statics: the selected static fields it holds.
        origin: its stored step of the joined axis' first step; None without one.
        steps: its steps along time; None without a time axis.
    """

    store: Store = field(repr=False)
    where: str
    secrets: frozenset[str] = field(repr=False)
    arrays: Mapping[str, zarr.Array] = field(repr=False)
    zarr_format: int
    fields: tuple[str, ...]
    statics: tuple[str, ...]
    origin: int | None = None
    steps: int | None = None

    @classmethod
    def open(
        cls,
        store: Store,
        where: str,
        secrets: frozenset[str],
        fields: tuple[str, ...],
        statics: tuple[str, ...],
        origin: int | None = None,
        steps: int | None = None,
    ) -> OpenedStore:
        """The store's root group's arrays read, beside what the loader selects of it.

        Args:
            store: the opened store.
            where: the store as messages name it.
            secrets: values known to be secret (kept out of every message).
            fields: the selected time-varying variables it holds.
            statics: the selected static fields it holds.
            origin: its stored step of the joined axis' first step, or None.
            steps: its steps along time, or None.
        """
        group = open_root_group(store, where, secrets)
        arrays = arrays_of(group, where, secrets)
        zarr_format = group.metadata.zarr_format
        return cls(store, where, secrets, arrays, zarr_format, fields, statics, origin, steps)


def opened_stores(opened: ZarrSource, source: Any, storage_options: Any) -> list[OpenedStore]:
    """Each store `opened` reads, with its arrays: the store itself, or each part of a
    join (the stores it reads something from, in the order given).

    Args:
        opened: the source, as `open_source` opened it.
        source: what it was opened from (a URL, path or Store, or a list of them).
        storage_options: the options it was opened with.
    """
    if opened.parts:
        return [
            OpenedStore.open(
                part.store,
                part.where,
                frozenset(part.secrets),
                fields=part.fields,
                statics=part.statics,
                origin=part.origin,
                steps=part.steps,
            )
            for part in opened.parts
        ]
    secrets = secrets_in(storage_options, source if isinstance(source, str) else None)
    return [
        OpenedStore.open(
            opened.store,
            opened.where,
            secrets,
            fields=tuple(opened.layouts),
            statics=tuple(opened.statics),
        )
    ]


def joined_store_reports(
    opened: ZarrSource,
    stores: Sequence[OpenedStore],
    source: Any,
    storage_options: Any,
) -> tuple[JoinedStoreReport, ...]:
    """What each store of a join gives, in the order given, those it reads nothing from
    included (nothing for one store).

    Args:
        opened: the source, as `open_source` opened it.
        stores: the stores it reads (`opened_stores`).
        source: the list of stores it was opened from.
        storage_options: the options it was opened with (one dict, or one per store).
    """
    if not opened.parts:
        return ()
    read = {s.where: _read_report(s, opened.geometry.num_samples) for s in stores}
    return tuple(
        read.get(where) or _unread_report(one, where, options)
        for one, where, options in _given(source, storage_options)
    )


def _given(source: Any, storage_options: Any) -> list[tuple[Any, str, dict[str, Any] | None]]:
    """Each store of the join as given: itself, as messages name it, and its options."""
    sources = source_list(source) or [source]
    found = []
    for one, options in zip(sources, options_per_store(storage_options, len(sources)), strict=True):
        where = describe(one, secrets_in(options, one if isinstance(one, str) else None))
        found.append((one, where, options))
    return found


def _read_report(store: OpenedStore, length: int) -> JoinedStoreReport:
    found = find_time_array(store.arrays, store.fields, store.steps) if store.steps else None
    return JoinedStoreReport(
        store=store.where,
        zarr_format=store.zarr_format,
        variables=store.fields,
        statics=store.statics,
        steps=store.steps,
        origin=store.origin,
        lost=None if store.steps is None else store.steps - length,
        steps_per_chunk=tuple(sorted({int(store.arrays[n].chunks[0]) for n in store.fields})),
        time=None if found is None else found[0],
    )


def _unread_report(source: Any, where: str, options: dict[str, Any] | None) -> JoinedStoreReport:
    """A store of the join the loader reads nothing from, opened to say what it holds."""
    secrets = secrets_in(options, source if isinstance(source, str) else None)
    store = open_store(source, options)
    group = open_root_group(store, where, secrets)
    arrays = arrays_of(group, where, secrets)
    data = sorted(n for n, a in arrays.items() if a.ndim >= 2)
    return JoinedStoreReport(
        store=where,
        zarr_format=group.metadata.zarr_format,
        variables=(),
        statics=(),
        steps=None,
        origin=None,
        lost=None,
        steps_per_chunk=(),
        time=named_time(arrays, data) if is_timed(arrays) else None,
        unread=tuple(data),
    )


def static_fields_only(
    arrays: Mapping[str, zarr.Array], spatial_dims: int = DEFAULT_SPATIAL_DIMS
) -> tuple[str, ...]:
    """The fields of a store that holds static fields only: no time coordinate, and every
    array of two or more dimensions names the grid's alone. Empty for any other store.

    Such a store joins by grid alone; read by itself, nothing names its time, so the
    loader would take its first axis (latitude) as the sample axis.

    Args:
        arrays: the store's arrays by name.
        spatial_dims: the trailing grid axes.
    """
    data = sorted(n for n, a in arrays.items() if a.ndim >= 2)
    if not data or is_timed(arrays):
        return ()
    dims = [dimension_names(arrays[n]) for n in data]
    if any(d is None or len(d) != spatial_dims for d in dims):
        return ()
    return tuple(data)


def static_only_text(fields: Sequence[str], where: str) -> str:
    """The line `inspect` of one store of static fields only adds: what the store is for.

    Args:
        fields: its static fields (`static_fields_only`).
        where: the store as messages name it.
    """
    return (
        f"static fields only ({', '.join(fields)}: no time dimension): this store joins by "
        f"grid alone; inspect it beside a store of time-varying fields (insitubatch inspect "
        f"FIELDS_URL {where}). Read by itself, its first axis would be taken for time"
    )


def joined_store_text(joined: JoinedStoreReport, time: str | None) -> str:
    """One store of a join in a line: what it gives, its steps (and its time coordinate
    where it names time otherwise than the joined axis) and what the join leaves out of
    them, and how many steps one of its reads brings; or why it gives nothing.

    Args:
        joined: the store's report.
        time: the joined time axis' name, or None.
    """
    text = f"{joined.store} (Zarr v{joined.zarr_format}): "
    if joined.unread and joined.time is None:
        return text + (
            f"static fields only ({', '.join(joined.unread)}): joins by grid alone; none "
            f"selected (name them with --variables)"
        )
    if joined.unread:
        return text + (
            f"none of {', '.join(joined.unread)} selected: not read, and its dates are not joined"
        )
    gives = [*joined.variables, *(f"{n} (static)" for n in joined.statics)]
    text += ", ".join(gives) or "nothing"
    if joined.steps is None:
        return text + "; no time axis (joined by grid alone)"
    text += f"; {joined.steps} steps"
    if joined.time is not None and joined.time != time:
        text += f" of {joined.time!r}"
    if joined.lost:
        text += f", {joined.lost} left out (the joined axis starts at its step {joined.origin})"
    chunks = "/".join(str(c) for c in joined.steps_per_chunk)
    return text + f"; {chunks} step{'' if joined.steps_per_chunk == (1,) else 's'} per chunk"
