"""The loaders under test, each a generator of (sample_index, {variable: array}) batches.

`ours` is the library's default graph. The others are what users write today: a naive
map-style Dataset (`arr[i]` per sample per variable) under a shuffling DataLoader, xbatcher's
BatchGenerator over `xarray.open_zarr` behind its torch MapDataset, and a chunk-wise
IterableDataset (shuffled chunk order, whole-chunk reads, shuffle within). The `insitubatch`
0.2.0 peer runs in its own interpreter: see `peer.py`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
import zarr
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

from benchmarks import latency_store
from benchmarks.latency_store import open_latency_store
from insitubatch_nodes import SAMPLE_INDEX_KEY, AsyncFetchNode, build_loader
from insitubatch_nodes.nodes.graph import graph_nodes

Batch = tuple[np.ndarray, dict[str, np.ndarray]]


def _arrays(path: str, latency_s: float, variables: Sequence[str]) -> dict[str, zarr.Array]:
    group = zarr.open_group(open_latency_store(path, latency_s, forks=True), mode="r")
    return {name: group[name] for name in variables}  # type: ignore[misc]


def ours(
    path: str, latency_s: float, variables: Sequence[str], batch_size: int, **kw: Any
) -> Iterator[Batch]:
    # The product's path: a plain path opens obstore's local store (plain file reads in
    # the decode threads); with latency, the delaying wrapper (async gets on the loop).
    loader = build_loader(
        open_latency_store(path, latency_s) if latency_s else path,
        list(variables),
        split="all",
        batch_size=batch_size,
        block_chunks=kw.get("block_chunks"),  # None: the builder's default
        max_inflight=kw.get("max_inflight"),  # None: self-tuning, as users run it
        shuffle=kw.get("shuffle", "pool"),
        device="cpu",
        seed=0,
    )
    fetch = next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))
    for batch in loader:
        index = batch.pop(SAMPLE_INDEX_KEY).numpy()
        if not latency_s:  # no wrapper to count reads: take the loader's own count
            latency_store.READS.value = fetch.stats.chunks_read
        yield index, {name: t.numpy() for name, t in batch.items()}


class _PerSample(Dataset[dict[str, Any]]):
    def __init__(self, path: str, latency_s: float, variables: Sequence[str], length: int) -> None:
        self.path, self.latency_s, self.variables, self.length = path, latency_s, variables, length
        self._arrays: dict[str, zarr.Array] | None = None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> dict[str, Any]:
        if self._arrays is None:  # opened per worker process
            self._arrays = _arrays(self.path, self.latency_s, self.variables)
        item = {name: array[i] for name, array in self._arrays.items()}
        item[SAMPLE_INDEX_KEY] = i
        return item


def _from_torch(batch: dict[str, Any]) -> Batch:
    index = batch.pop(SAMPLE_INDEX_KEY).numpy()
    return index, {name: t.numpy() for name, t in batch.items()}


def naive(
    path: str, latency_s: float, variables: Sequence[str], batch_size: int, **kw: Any
) -> Iterator[Batch]:
    length = _arrays(path, 0, variables)[variables[0]].shape[0]
    workers = kw.get("num_workers", 0)
    loader = DataLoader(
        _PerSample(path, latency_s, variables, length),
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        generator=torch.Generator().manual_seed(0),
        prefetch_factor=4 if workers else None,
        multiprocessing_context="fork" if workers else None,  # Linux's default for users
    )
    for batch in loader:
        yield _from_torch(batch)


def xbatcher_loader(
    path: str, latency_s: float, variables: Sequence[str], batch_size: int, **kw: Any
) -> Iterator[Batch]:
    """xbatcher as its users run it: one time step per generator item, xbatcher's torch
    MapDataset under a shuffling DataLoader with worker processes. Tuned: `chunks=None`
    opens the store without dask (xarray's lazy indexing reads the chunk directly); dask's
    default graph per item was about 2x slower at 1 step per chunk. The `time` coordinate
    rides along as xbatcher's target (`y`), which is how the sample index comes back."""
    import xarray as xr
    import xbatcher
    from xbatcher.loaders.torch import MapDataset

    store = open_latency_store(path, latency_s, forks=True)
    dataset = xr.open_zarr(store, consolidated=False, chunks=None)[list(variables)]
    sizes = dict(dataset.sizes)
    inputs = xbatcher.BatchGenerator(dataset, input_dims={**sizes, "time": 1})
    times = xbatcher.BatchGenerator(dataset["time"], input_dims={"time": 1})
    workers = kw.get("num_workers", 2)
    loader = DataLoader(
        MapDataset(inputs, times, transform=_stack_variables),
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        generator=torch.Generator().manual_seed(0),
        prefetch_factor=4 if workers else None,
        multiprocessing_context="fork" if workers else None,
    )
    for x, y in loader:  # x: (batch, variable, 1, lat, lon); y: (batch, 1) time index
        yield y[:, 0].numpy(), {name: x[:, k, 0].numpy() for k, name in enumerate(variables)}


def _stack_variables(item: Any) -> torch.Tensor:
    """xbatcher's default transform squeezes a single variable; several are stacked."""
    return torch.from_numpy(item.to_dataarray(dim="variable").values)


class _ChunkWise(IterableDataset[dict[str, Any]]):
    def __init__(self, path: str, latency_s: float, variables: Sequence[str]) -> None:
        self.path, self.latency_s, self.variables = path, latency_s, variables

    def __iter__(self) -> Iterator[dict[str, Any]]:
        arrays = _arrays(self.path, self.latency_s, self.variables)
        first = arrays[self.variables[0]]
        step = first.chunks[0]
        starts = np.arange(0, first.shape[0], step)
        info = get_worker_info()
        rng = np.random.default_rng(0)
        order = rng.permutation(starts)
        if info is not None:
            order = order[info.id :: info.num_workers]
        for start in order.tolist():
            stop = min(start + step, first.shape[0])
            block = {name: a[start:stop] for name, a in arrays.items()}
            for j in rng.permutation(stop - start).tolist():
                item = {name: values[j] for name, values in block.items()}
                item[SAMPLE_INDEX_KEY] = start + j
                yield item


def chunkwise(
    path: str, latency_s: float, variables: Sequence[str], batch_size: int, **kw: Any
) -> Iterator[Batch]:
    workers = kw.get("num_workers", 2)
    loader = DataLoader(
        _ChunkWise(path, latency_s, variables),
        batch_size=batch_size,
        num_workers=workers,
        prefetch_factor=4 if workers else None,
        multiprocessing_context="fork" if workers else None,
    )
    for batch in loader:
        yield _from_torch(batch)


LOADERS = {
    "insitubatch-nodes": (ours, {}),
    "insitubatch-nodes block": (ours, {"shuffle": "block"}),
    "naive DataLoader w0": (naive, {"num_workers": 0}),
    "naive DataLoader w2": (naive, {"num_workers": 2}),
    "xbatcher w2": (xbatcher_loader, {"num_workers": 2}),
    "chunk-wise IterableDataset w2": (chunkwise, {"num_workers": 2}),
}
