"""OpenedArrays: the selected zarr arrays, opened once and shared by every epoch's reader.

Opening an array reads its metadata: one round trip to an object store, and the group's
first. Readers live on one epoch's event loop, but an opened array does not depend on a
loop, so the fetch node keeps one `OpenedArrays` for its whole life: the first epoch opens
the arrays all at once (two round trips, not one per array), later epochs none. The arrays
cannot change under a training run without the loader's layouts going stale anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import zarr
import zarr.api.asynchronous
from zarr.abc.store import Store

from insitubatch_nodes.io.metadata.zarr_compat import codec_pipeline

AsyncArray = zarr.AsyncArray  # type: ignore[type-arg]


class OpenedArrays:
    def __init__(self, store: Store) -> None:
        self._store = store
        self._arrays: dict[tuple[str, str | None], AsyncArray] = {}

    async def open(self, names: Sequence[str], pipeline: str | None = None) -> list[AsyncArray]:
        """`names`' arrays in order; those not open yet are opened concurrently, through
        zarr's `pipeline` (e.g. "zarrs") when one is named."""
        missing = [name for name in names if (name, pipeline) not in self._arrays]
        if missing:
            group = await zarr.api.asynchronous.open_group(store=self._store, mode="r")
            with codec_pipeline(pipeline):
                found = await asyncio.gather(*(group.getitem(name) for name in missing))
            for name, array in zip(missing, found, strict=True):
                self._arrays[(name, pipeline)] = array  # type: ignore[assignment]
        return [self._arrays[(name, pipeline)] for name in names]
