"""CPU per local chunk read, by reader: what a read of a local chunk file costs besides
decoding it, through obstore, through zarr's LocalStore, and with plain file reads.

    python -m benchmarks.local_read_cpu --steps-per-chunk 1 --reads 4000 --rounds 5

Each round reads the store's chunk files (page-cached: warmed first) with every reader in
turn, `--inflight` at a time, and prints the process CPU (every thread's, native ones
included) per read; the readers' order rotates between rounds, and the last lines give
each reader's median and range over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import obstore
import obstore.store
from zarr.core.buffer import default_buffer_prototype
from zarr.storage import LocalStore, ObjectStore

from benchmarks.stores import ensure_store
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES
from insitubatch_nodes.io.reads.local_files import read_file

Reader = Callable[[list[str]], Awaitable[None]]


def readers(root: Path, inflight: int, threads: int) -> dict[str, Reader]:
    """Each way to read a list of keys under `root`, by name.

    Args:
        root: the store's directory.
        inflight: the most reads at a time of the readers that read one key per task.
        threads: the plain reads' thread pool size (and shares of the batched reader).
    """
    prototype = default_buffer_prototype()
    via_obstore = ObjectStore(obstore.store.LocalStore(str(root)), read_only=True)
    raw_obstore = obstore.store.LocalStore(str(root))
    via_zarr = LocalStore(str(root), read_only=True)
    pool = ThreadPoolExecutor(threads)
    scratches = threading.local()

    async def bounded(keys: list[str], one: Callable[[str], Awaitable[object]]) -> None:
        gate = asyncio.Semaphore(inflight)

        async def read(key: str) -> None:
            async with gate:
                await one(key)

        async with asyncio.TaskGroup() as group:
            for key in keys:
                group.create_task(read(key))

    def plain(key: str) -> object:
        scratch = getattr(scratches, "buffer", None)
        if scratch is None:
            scratch = scratches.buffer = bytearray(1 << 22)  # more than any chunk here
        return read_file(f"{root}/{key}", scratch)

    async def zarr_objectstore(keys: list[str]) -> None:
        await bounded(keys, lambda key: via_obstore.get(key, prototype=prototype))

    async def obstore_get_async(keys: list[str]) -> None:
        async def one(key: str) -> object:
            return await (await obstore.get_async(raw_obstore, key)).bytes_async()

        await bounded(keys, one)

    async def zarr_localstore(keys: list[str]) -> None:
        await bounded(keys, lambda key: via_zarr.get(key, prototype=prototype))

    async def pread_per_read(keys: list[str]) -> None:
        loop = asyncio.get_running_loop()
        await bounded(keys, lambda key: loop.run_in_executor(pool, plain, key))

    async def pread_batched(keys: list[str]) -> None:  # as the library's local path: a hop
        loop = asyncio.get_running_loop()  # per decode thread, each reading its share

        def each(share: list[str]) -> None:
            for key in share:
                plain(key)

        await asyncio.gather(
            *(loop.run_in_executor(pool, each, keys[i::threads]) for i in range(threads))
        )

    async def plain_inline(keys: list[str]) -> None:  # the floor: no pool, no loop
        for key in keys:
            plain(key)

    return {
        "zarr ObjectStore(obstore LocalStore).get": zarr_objectstore,
        "obstore.get_async + bytes_async": obstore_get_async,
        "zarr LocalStore.get": zarr_localstore,
        "read_file in a pool, one hop per read": pread_per_read,
        "read_file in a pool, one hop per thread": pread_batched,
        "read_file inline, one thread": plain_inline,
    }


def main(argv: list[str] | None = None) -> None:
    """Print CPU microseconds per local chunk read, per reader.

    Args:
        argv: command-line arguments (default: `sys.argv[1:]`).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps-per-chunk", type=int, default=1, choices=(1, 4, 24))
    parser.add_argument("--reads", type=int, default=4000, help="reads per reader per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--inflight", type=int, default=16, help="reads at a time")
    parser.add_argument("--threads", type=int, default=2, help="the plain reads' pool")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/insitubatch-ab")
    args = parser.parse_args(argv)
    steps = {1: 480, 4: 960, 24: 1920}[args.steps_per_chunk]
    root = ensure_store(args.cache, steps, args.steps_per_chunk, "zstd").resolve()
    keys = sorted(
        str(path.relative_to(root))
        for name in ERA5_VARIABLES
        for path in (root / name / "c").rglob("*")
        if path.is_file()
    )
    keys = [keys[i % len(keys)] for i in range(args.reads)]
    sizes = [os.path.getsize(root / key) for key in keys[: len(set(keys))]]
    print(f"{len(set(keys))} chunk files, {statistics.median(sizes) / 1e3:.0f} kB median")
    ways = readers(root, args.inflight, args.threads)
    results: dict[str, list[float]] = {name: [] for name in ways}

    async def run() -> None:
        names = list(ways)
        for name in names:  # warm: page cache, pools, runtimes
            await ways[name](keys[: min(len(keys), 500)])
        for round_ in range(args.rounds):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                cpu, wall = time.process_time(), time.perf_counter()
                await ways[name](keys)
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                results[name].append(cpu / len(keys) * 1e6)
                print(
                    f"round {round_}: {name}: {cpu / len(keys) * 1e6:.0f} us CPU, "
                    f"{wall / len(keys) * 1e6:.0f} us wall per read"
                )

    asyncio.run(run())
    for name, per_read in results.items():
        print(
            f"{name}: {statistics.median(per_read):.0f} "
            f"[{min(per_read):.0f}-{max(per_read):.0f}] us CPU per read"
        )


if __name__ == "__main__":
    main()
