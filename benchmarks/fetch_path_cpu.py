"""Python CPU per get of the fetch path alone: what the library spends around each read.

`cpu_per_read` measures a whole loader, whose CPU behind latency is mostly the store
client's (obstore's native threads) and varies by +-20% with the machine's load. This
isolates the library's part of a get: `ChunkFetcher.fetch` of every chunk of the
1-step-per-chunk ERA5-shaped store, copied into a zarr `MemoryStore` behind the same
fixed delay per read (`latency_store.LatencyStore`, pure asyncio: no native threads), the
chunks handed to a sink that does nothing. What it counts per get: the task, the retry
policy, the read slot and its timeout, the counters and the latency estimate, the store
wrapper's sleep, and the hops to the decode threads; not decoding.

    python -m benchmarks.fetch_path_cpu --latency-ms 30 --rounds 10
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import statistics
import time
from pathlib import Path

from benchmarks.latency_store import LatencyStore, memory_copy
from benchmarks.stores import ensure_store
from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES
from insitubatch_nodes.core.read_plan import ChunkRead
from insitubatch_nodes.io.reads.stored_array import StoredArray, stored_array
from insitubatch_nodes.io.reads.stored_chunks import ChunkFetcher
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.graph import graph_nodes

STEPS = 480


async def _measure(path: Path, latency_s: float, rounds: int) -> tuple[list[float], int]:
    store = LatencyStore(await memory_copy(path), latency_s, str(path), forks=False)
    loader = build_loader(store, list(ERA5_VARIABLES), split="all", batch_size=32, device="cpu")
    fetch = next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))
    context = fetch.context
    names = list(ERA5_VARIABLES)
    arrays = await context.opened_arrays.open(names)
    reads: dict[StoredArray, tuple[ChunkRead, ...]] = {}
    for name, array in zip(names, arrays, strict=True):
        stored = stored_array(name, array)
        assert isinstance(stored, StoredArray), f"{name} is read through zarr: {stored}"
        rest = (0,) * (array.ndim - 1)
        reads[stored] = tuple(ChunkRead((step, *rest), step) for step in range(STEPS))
    gets = sum(len(wanted) for wanted in reads.values())
    fetcher = ChunkFetcher(context)

    def ignore(array: StoredArray, items: object) -> None:
        pass

    for _ in range(3):  # the in-flight target learns the store
        await fetcher.fetch(reads, ignore)
    per_get = []
    for _ in range(rounds):
        started = time.process_time()
        await fetcher.fetch(reads, ignore)
        per_get.append((time.process_time() - started) / gets * 1e6)
    return per_get, context.inflight.limit


def main(argv: list[str] | None = None) -> None:
    """Print the fetch path's CPU microseconds per get: the median and best of the rounds.

    Args:
        argv: command-line arguments (default: `sys.argv[1:]`).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency-ms", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/insitubatch-ab")
    args = parser.parse_args(argv)
    path = ensure_store(args.cache, STEPS, 1, "zstd")
    loop = asyncio.new_event_loop()
    loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(2))
    try:
        per_get, limit = loop.run_until_complete(
            _measure(path, args.latency_ms / 1000, args.rounds)
        )
    finally:
        loop.close()
    print(
        f"fetch path, {len(ERA5_VARIABLES) * STEPS} gets a round, reads in flight {limit}: "
        f"{statistics.median(per_get):.1f} us CPU per get (median of {args.rounds} rounds), "
        f"best {min(per_get):.1f} us"
    )


if __name__ == "__main__":
    main()
