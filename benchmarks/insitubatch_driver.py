"""Runs `insitubatch` 0.2.0 on one benchmark store, inside its own Python >= 3.12 venv.

Started by `peer.py` as `python -m benchmarks.insitubatch_driver ...` from the repository
root, so it shares `measure.py` (the timed loop and checksums) and `latency_store.py` (the
delaying store) with every other loader, and imports neither torch nor this project.
Writes the yielded order and checksums to `--out` (.npz) and prints one JSON line.

With `--epochs N` it runs N whole epochs of one dataset (`set_epoch` between them), and
with `--cache-dir` turns on its own cache as its README does (`cache_dir=..., persist=True`:
decoded chunks in files there, revived by later epochs and runs); the JSON line then also
has one entry per epoch (seconds, CPU seconds, its cache hits and misses, the store's
reads), and whether every epoch yielded every sample once with the same values.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from insitubatch import InSituDataset, obstore_store, open_geometries, split_by_chunk

from benchmarks import latency_store
from benchmarks.measure import Batch, Drained, drain, peak_rss_mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", required=True)
    parser.add_argument("--variables", required=True, help="comma-separated")
    parser.add_argument("--latency-s", type=float, default=0.0)
    parser.add_argument("--bandwidth-bytes-s", type=float, default=0.0)
    parser.add_argument("--batch-size", type=int, required=True)
    parser.add_argument("--max-samples", type=int, required=True)
    parser.add_argument("--max-seconds", type=float, required=True)
    parser.add_argument("--block-chunks", type=int, required=True)
    parser.add_argument("--max-inflight", type=int, required=True)
    parser.add_argument("--prefetch-depth", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=1, help="whole epochs, one dataset")
    parser.add_argument("--cache-dir", type=Path, default=None, help="its cache_dir (persist)")
    parser.add_argument(
        "--cache-budget-bytes", type=int, default=0, help="its cache_budget_bytes (0: its own)"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    variables = args.variables.split(",")

    rss_before = peak_rss_mb()
    delayed = args.latency_s > 0 or args.bandwidth_bytes_s > 0
    store = (
        latency_store.open_latency_store(
            args.path, args.latency_s, bandwidth_bytes_s=args.bandwidth_bytes_s or None
        )
        if delayed
        else obstore_store(Path(args.path).resolve().as_uri())  # its documented local path
    )
    geometries = open_geometries(store, variables=variables)
    # Every chunk in the shuffled train split, as the other loaders read the whole array.
    manifest = split_by_chunk(geometries[variables[0]], fractions=(1.0, 0.0, 0.0))
    dataset = InSituDataset(
        store,
        manifest,
        geometries=geometries,
        batch_size=args.batch_size,
        block_chunks=args.block_chunks,
        max_inflight=args.max_inflight,
        prefetch_depth=args.prefetch_depth,
        seed=0,
        **_cache_options(args),
    )
    epochs: list[dict[str, object]] = []
    passes: list[Drained] = []
    for epoch in range(args.epochs):
        dataset.set_epoch(epoch)
        reads_before, cpu_before = latency_store.READS.value, time.process_time()
        batches = iter(dataset.train)
        drained = drain(_numbered(batches), variables, args.max_samples, args.max_seconds)
        batches.close()  # publishes the pass's counters
        cpu_s = time.process_time() - cpu_before
        reads = latency_store.READS.value - reads_before
        epochs.append(
            {
                "samples": int(drained.order.size),
                "seconds": drained.seconds,
                "cpu_s": cpu_s,
                "reads": int(reads) if delayed else None,
                "cache_hits": dataset.cache_hits,  # this pass's
                "cache_misses": dataset.cache_misses,
            }
        )
        passes.append(drained)
    drained = passes[0]
    rss_growth = peak_rss_mb() - rss_before
    reads = latency_store.READS.value if delayed else dataset.cache_misses
    np.savez(args.out, order=drained.order, sums=drained.sums)
    print(
        json.dumps(
            {
                "samples": int(drained.order.size),
                "seconds": drained.seconds,
                "first_batch_s": drained.first_batch_s,
                "first_batch_samples": drained.first_batch_samples,
                "nbytes": drained.nbytes,
                "reads": int(reads),
                "peak_rss_MB": peak_rss_mb(),
                "rss_growth_MB": rss_growth,
                "settings": {
                    "block_chunks": dataset.block_chunks,  # after its own widening
                    "max_inflight": dataset.scheduler_config.max_inflight,
                    "prefetch_depth": dataset.prefetch_depth,
                    "store": "LatencyStore(LocalStore)" if delayed else "obstore_store(file://)",
                    "cache_dir": None if args.cache_dir is None else str(args.cache_dir),
                    "cache_budget_bytes": dataset.cache_budget_bytes,
                },
                "epochs": epochs,  # per epoch: samples, seconds, CPU, store reads, cache
                "epochs_agree": _epochs_agree(passes),
            }
        )
    )


def _cache_options(args: argparse.Namespace) -> dict[str, object]:
    """Its cache as its README turns it on (and a budget, when one is given)."""
    options: dict[str, object] = {}
    if args.cache_dir is not None:
        options.update(cache_dir=str(args.cache_dir), persist=True)
    if args.cache_budget_bytes:
        options["cache_budget_bytes"] = args.cache_budget_bytes
    return options


def _epochs_agree(epochs: list[Drained]) -> bool:
    """Each epoch yielded every sample once, with the same values as the first epoch."""
    first = epochs[0]
    reference = first.sums[np.argsort(first.order)]
    for drained in epochs:
        order = np.sort(drained.order)
        if not np.array_equal(order, np.arange(order.size)):
            return False
        if not np.array_equal(drained.sums[np.argsort(drained.order)], reference):
            return False
    return True


def _numbered(batches: Iterator[object]) -> Iterator[Batch]:
    for batch in batches:
        yield batch.sample_indices, batch.arrays  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
