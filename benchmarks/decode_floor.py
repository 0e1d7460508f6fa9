"""The decode floor beside the loader (issue 33): what one epoch costs per chunk, in CPU
over every thread and outside the decode pool, against a reader that only decodes.

    python -m benchmarks.decode_floor                 # 1, 4, 24 steps per chunk; local, 30 ms
    python -m benchmarks.decode_floor --quick         # smoke run: 96 steps, 1 repeat
    python -m benchmarks.decode_floor --steps-per-chunk 1 --latency-ms 0 --repeats 3

Per scenario (steps per chunk; the local store, or an in-memory copy behind a delay per
get, an object store whose client costs next to no CPU), every reader runs whole epochs,
`--repeats` rounds, the readers' order rotating between rounds; each row is the median
with its range, and the floor comparisons pair each epoch with the floor's of the same
round. Readers: the decode floor (bytes in RAM, reused memory, tasks of many chunks),
plain file reads + numcodecs, tensorstore, zarr with its default pipeline and with
zarrs (local only: tensorstore's kvstore cannot be put behind a Python delay, and zarrs
falls back to zarr's pipeline on a memory store), gets per chunk + numcodecs, and the
loader (`build_loader` defaults, batch 32, a consumer that does nothing) in its first
and second epoch, at its default decode threads and, locally, at 1. obstore's local store is
reported apart: locally its gets, and behind the delay the loader over it (the stand-in
`make bench` uses), since its native threads cost far more per get than an object
store's client should. Results go to `--out` as JSON as well.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import obstore.store
from zarr.storage import ObjectStore

from benchmarks.floor_readers import (
    ZARRS_PIPELINE,
    DecodeFloor,
    EpochChunks,
    PlainFileReads,
    Reader,
    StoreGets,
    Tensorstore,
    ZarrArrays,
)
from benchmarks.floor_samples import Sample, measure, table
from benchmarks.latency_store import LatencyStore, memory_copy, open_latency_store
from benchmarks.stores import ensure_store, warm_page_cache
from benchmarks.thread_cpu import PythonThreadsCPU
from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.graph import graph_nodes

HERE = Path(__file__).resolve().parent
TIME_STEPS = {1: 480, 4: 960, 24: 960}  # 1920, 960 and 160 chunks; 223-445 MB decoded
QUICK_TIME_STEPS = 96
LOADER_COUNTERS = ("decode_cpu_s", "gather_s", "fetch_loop_busy_fraction", "chunks_read")


@dataclass(frozen=True)
class Scenario:
    """One table: a chunking, read locally or behind a delay.

    Args:
        steps_per_chunk: time steps per chunk.
        latency_ms: the delay per get of the in-memory copy, 0 for the local store.
        path: the store's directory.
    """

    steps_per_chunk: int
    latency_ms: float
    path: Path

    @property
    def title(self) -> str:
        """The table's heading: the chunking and where the store is."""
        where = "local" if not self.latency_ms else f"in memory behind {self.latency_ms:g} ms"
        steps = f"{self.steps_per_chunk} step{'s' if self.steps_per_chunk > 1 else ''}"
        return f"{steps} per chunk, {where}"


def loader_epochs(
    name: str,
    source: Any,
    decode_threads: int | None,
    repeat: int,
    chunk_nbytes: int,
    threads: PythonThreadsCPU,
) -> list[Sample]:
    """A fresh loader's first and second epoch, each a sample with the loader's own counters.

    Args:
        name: the rows' name (the epoch is added).
        source: what `build_loader` reads (a path or a zarr store).
        decode_threads: the loader's decode threads, None for its default.
        repeat: the interleaved round.
        chunk_nbytes: bytes of one decoded chunk.
        threads: the per-thread CPU clock.
    """
    loader = build_loader(
        source,
        list(ERA5_VARIABLES),
        split="all",
        batch_size=32,
        device="cpu",
        decode_threads=decode_threads,
    )
    fetch = next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))

    def epoch() -> int:
        before = fetch.stats.chunks_read
        for _ in loader:  # a consumer that does nothing
            pass
        return fetch.stats.chunks_read - before

    samples = []
    try:
        for number in (1, 2):
            sample = measure(f"{name}, epoch {number}", repeat, epoch, chunk_nbytes, threads)
            stats = loader.stats()
            sample.counters = {key: stats[key] for key in LOADER_COUNTERS}
            samples.append(sample)
    finally:
        loader.close()
    return samples


Run = Callable[[int], list[Sample]]


def scenario_runs(
    scenario: Scenario, chunks: EpochChunks, args: argparse.Namespace, threads: PythonThreadsCPU
) -> tuple[dict[str, Run], list[Reader]]:
    """Each row's epoch, by name (a callable taking the round), and the readers to close.

    Args:
        scenario: the chunking and where the store is.
        chunks: the store's chunks.
        args: the command line (threads, chunks per task).
        threads: the per-thread CPU clock.
    """
    per_task, pool = args.task_chunks, args.threads
    nbytes = chunks.chunk_nbytes
    readers: list[Reader] = [DecodeFloor(chunks, pool, per_task)]
    if not scenario.latency_ms:
        loader_source: Any = str(scenario.path)
        local = ObjectStore(obstore.store.LocalStore(str(scenario.path)), read_only=True)
        readers += [
            PlainFileReads(chunks, pool, per_task),
            Tensorstore(chunks, per_task),
            ZarrArrays(str(scenario.path), "zarr + zarrs pipeline", chunks, ZARRS_PIPELINE),
            ZarrArrays(str(scenario.path), "zarr, default pipeline", chunks),
            StoreGets(local, "obstore LocalStore", chunks, pool, per_task),
        ]
    else:
        delay = scenario.latency_ms / 1000
        copy = asyncio.run(memory_copy(scenario.path))
        loader_source = LatencyStore(copy, delay, str(scenario.path), forks=False)
        label = f"in-memory store behind {scenario.latency_ms:g} ms"
        readers += [
            StoreGets(loader_source, label, chunks, pool, per_task),
            StoreGets(loader_source, label, chunks, pool, per_task, decode=False),
            ZarrArrays(loader_source, f"zarr, default pipeline, {label}", chunks),
        ]
    runs: dict[str, Run] = {
        reader.name: (
            lambda r, reader=reader: [measure(reader.name, r, reader.read_epoch, nbytes, threads)]
        )
        for reader in readers
    }
    ours = "insitubatch_nodes"
    runs[ours] = lambda r: loader_epochs(ours, loader_source, None, r, nbytes, threads)
    if not scenario.latency_ms:  # where decode binds; behind a delay the reads in flight do
        one = f"{ours}, 1 decode thread"
        runs[one] = lambda r: loader_epochs(one, loader_source, 1, r, nbytes, threads)
    else:
        over = f"{ours}, obstore LocalStore behind {scenario.latency_ms:g} ms"
        stand_in = open_latency_store(str(scenario.path), scenario.latency_ms / 1000)
        runs[over] = lambda r: loader_epochs(over, stand_in, None, r, nbytes, threads)
    return runs, readers


def run_scenario(
    scenario: Scenario, args: argparse.Namespace, threads: PythonThreadsCPU
) -> list[Sample]:
    """Every row's epochs over `args.repeats` rounds, the order rotating, after one
    untimed epoch of each (the loaders' warm-up is a loader of its own).

    Args:
        scenario: the chunking and where the store is.
        args: the command line.
        threads: the per-thread CPU clock.
    """
    chunks = EpochChunks.of(scenario.path, tuple(ERA5_VARIABLES))
    runs, readers = scenario_runs(scenario, chunks, args, threads)
    names = list(runs)
    samples: list[Sample] = []
    try:
        for name in names:  # warm: arrays opened, pools started, code paths taken
            warm_page_cache(scenario.path)
            runs[name](-1)
        for repeat in range(args.repeats):
            shift = repeat % len(names)
            for name in names[shift:] + names[:shift]:
                warm_page_cache(scenario.path)  # this VM drops idle file pages
                got = runs[name](repeat)
                samples += got
                for sample in got:
                    print(
                        f"  round {repeat}: {sample.reader}: "
                        f"{sample.per_chunk_us(sample.cpu_s):.0f} us CPU per chunk, "
                        f"{sample.mb_per_s:.0f} MB/s",
                        flush=True,
                    )
    finally:
        for reader in readers:
            reader.close()
    return samples


def load_average() -> str:
    """The host's load averages (1, 5, 15 minutes), as `uptime` prints them."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> None:
    """Print one table per scenario and write every sample to `--out`.

    Args:
        argv: command-line arguments (default: `sys.argv[1:]`).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps-per-chunk", default="1,4,24", help="comma-separated")
    parser.add_argument("--latency-ms", default="0,30", help="comma-separated; 0: local")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="the floor's decode threads")
    parser.add_argument("--task-chunks", type=int, default=32, help="chunks per task")
    parser.add_argument("--quick", action="store_true", help="96 time steps, 1 repeat")
    parser.add_argument("--cache", type=Path, default=HERE / ".cache")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "decode_floor.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats = 1
    threads = PythonThreadsCPU().__enter__()  # before any reader starts a thread
    results: dict[str, Any] = {"load_before": load_average(), "scenarios": []}
    print(f"load average before: {results['load_before']}", flush=True)
    for steps in (int(s) for s in args.steps_per_chunk.split(",")):
        time_steps = QUICK_TIME_STEPS if args.quick else TIME_STEPS[steps]
        path = ensure_store(args.cache, time_steps, steps, "zstd").resolve()
        for latency in (float(ms) for ms in args.latency_ms.split(",")):
            scenario = Scenario(steps, latency, path)
            print(f"\n### {scenario.title}", flush=True)
            samples = run_scenario(scenario, args, threads)
            floor = DecodeFloor.name
            print("\n" + table(samples, floor), flush=True)
            results["scenarios"].append(
                {
                    "steps_per_chunk": steps,
                    "latency_ms": latency,
                    "time_steps": time_steps,
                    "load_after": load_average(),
                    "samples": [s.as_json() for s in samples],
                }
            )
            write(results, args.out)  # after every scenario: a long run stopped keeps them
    results["load_after"] = load_average()
    print(f"\nload average after: {results['load_after']}")
    write(results, args.out)
    print(f"samples: {args.out}")


def write(results: dict[str, Any], out: Path) -> None:
    """Write the results so far as JSON.

    Args:
        results: what `main` gathered.
        out: the file.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
