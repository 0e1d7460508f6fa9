"""`insitubatch cache URL --split train --folder DIR --max-bytes 200G`: fill a chunk cache
folder before training, so that every epoch (the first included) of every run on the
host reads from local disk, and runs may open it read-only.

It reads the split once, every chunk of it, in a fixed order (the evaluation order of one
rank), through the same loader and cache a training run uses: the entries it writes are
the ones training looks up.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from insitubatch_nodes.builder.build_loader import build_loader
from insitubatch_nodes.core.byte_sizes import nbytes_text
from insitubatch_nodes.io.cache.chunk_cache import LAYOUT, CacheSpec
from insitubatch_nodes.io.cache.segment_writer import folder_bytes

PREPARE_BATCH = 64  # samples per batch while preparing: fewer, larger gathers


def prepare_cache(
    url: str | list[str],
    folder: str | Path,
    max_bytes: int,
    *,
    split: str = "train",
    variables: Sequence[str] | None = None,
    manifest: str | Path | None = None,
    storage_options: dict[str, Any] | list[dict[str, Any] | None] | None = None,
    join: str = "exact",
) -> dict[str, Any]:
    """Read `split` of `url` once through a cache in `folder`; what it did, as plain data.

    Args:
        url: the Zarr group (path or URL), or a list of them joined as one source.
        folder: the cache folder (made if missing; may hold entries already).
        max_bytes: the cache's budget, shared with every run that uses the folder.
        split: the split to prepare (a training run of that split then hits).
        variables: the arrays a training run selects (default: the loader's).
        manifest: the split manifest training uses, or None for the default.
        storage_options: obstore client options for an object-store URL (for a join: one
            dict for every store, or one per store).
        join: how a list of stores is aligned on time, as `build_loader` takes it.
    """
    spec = CacheSpec(folder, max_bytes)
    loader = build_loader(
        url,
        variables,
        split=split,
        batch_size=PREPARE_BATCH,
        device="cpu",
        rank=0,
        world_size=1,
        evaluation=True,
        manifest=manifest,
        storage_options=storage_options,
        cache=spec,
        join=join,
    )
    with loader:
        for _ in loader:
            pass
        stats = loader.stats()
    return {
        "folder": str(spec.folder),
        "split": split,
        "chunks": int(stats["chunks_read"]),
        "already_cached": int(stats.get("cache_hits", 0)),
        "bytes_written": int(stats.get("cache_bytes_written", 0)),
        "cache_bytes": folder_bytes(spec.folder / LAYOUT),
        "max_bytes": max_bytes,
    }


def prepare_text(result: dict[str, Any]) -> str:
    """`prepare_cache`'s result as the lines the command prints.

    Args:
        result: what `prepare_cache` returned.
    """
    full = result["cache_bytes"] >= result["max_bytes"] * 0.99
    return (
        f"split {result['split']!r}: {result['chunks']} chunks, {result['already_cached']} "
        f"already cached, {nbytes_text(result['bytes_written'])} written\n"
        f"{result['folder']}: {nbytes_text(result['cache_bytes'])} of "
        f"{nbytes_text(result['max_bytes'])}"
        + (" (full: later chunks were not cached)" if full else "")
    )
