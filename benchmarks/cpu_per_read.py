"""CPU per chunk read, decode excluded: what a get costs the host besides its bytes.

Behind latency, with one time step per chunk, a loader on two cores runs out of CPU
before it runs out of reads in flight; what limits it is the Python work around each
get (tasks, futures, retries, wake-ups, thread hops). This runs the default loader on
the 1-step-per-chunk ERA5-shaped store behind a fixed delay per read and reports the
process's CPU time per chunk read, less the decode threads' decode time
(`FetchStats.decode_cpu_ns`); the rest (gets, scheduling, the gather, the consumer loop)
is what per-read work costs. That rest is split into what Python threads spent (the
library's work per read, and the latency wrapper's) and what the store client's native
threads spent (obstore's runtime reading local files here; an object store's HTTP and
TLS work in production), which the library does not control.

    python -m benchmarks.cpu_per_read --latency-ms 30 --epochs 4
    python -m benchmarks.cpu_per_read --local --epochs 4   # the store's path, unwrapped

`--local` opens the store by its path, as a user of a local store does, so the loader
reads its chunk files with plain file reads in the decode threads (`io/reads/local_files.py`)
instead of through obstore: the same store's reads, without the wrapper standing in for
an object store, and without obstore's native threads.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.latency_store import open_latency_store
from benchmarks.stores import ensure_store
from benchmarks.thread_cpu import PythonThreadsCPU
from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.graph import graph_nodes


def main(argv: list[str] | None = None) -> None:
    """Print samples/s and CPU microseconds per chunk read.

    Args:
        argv: command-line arguments (default: `sys.argv[1:]`).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency-ms", type=float, default=30.0)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--steps-per-chunk", type=int, default=1)
    parser.add_argument("--max-inflight", type=int, default=None)
    parser.add_argument(
        "--local", action="store_true", help="open the store by its path (no delay, no obstore)"
    )
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/insitubatch-ab")
    args = parser.parse_args(argv)
    steps = {1: 480, 4: 960, 24: 1920}[args.steps_per_chunk]
    python_threads = PythonThreadsCPU().__enter__()  # before the loader starts threads
    store = ensure_store(args.cache, steps, args.steps_per_chunk, "zstd")
    source = str(store) if args.local else open_latency_store(str(store), args.latency_ms / 1000)
    loader = build_loader(
        source,
        list(ERA5_VARIABLES),
        split="all",
        batch_size=32,
        device="cpu",
        max_inflight=args.max_inflight,
    )
    fetch = next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))
    for _ in loader:  # warm: arrays opened, the in-flight target learnt
        pass
    stats = fetch.stats
    chunks, decode_ns = stats.chunks_read, stats.decode_cpu_ns
    python_threads.start()
    cpu, wall, samples = time.process_time(), time.perf_counter(), 0
    for _ in range(args.epochs):
        for batch in loader:
            samples += len(batch["sample_index"])
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    python_cpu = python_threads.seconds()
    python_threads.__exit__()
    chunks, decode_s = stats.chunks_read - chunks, (stats.decode_cpu_ns - decode_ns) / 1e9
    print(
        f"{samples / wall:.0f} samples/s, {chunks / wall:.0f} chunk reads/s, "
        f"reads in flight {fetch.context.inflight.limit}, "
        f"{stats.local_file_reads} plain file reads; per chunk read: "
        f"{cpu / chunks * 1e6:.0f} us CPU, {decode_s / chunks * 1e6:.0f} us of it decoding, "
        f"{(cpu - decode_s) / chunks * 1e6:.0f} us the rest: "
        f"{(python_cpu - decode_s) / chunks * 1e6:.0f} us in Python threads, "
        f"{(cpu - python_cpu) / chunks * 1e6:.0f} us in the store client's native threads"
    )


if __name__ == "__main__":
    main()
