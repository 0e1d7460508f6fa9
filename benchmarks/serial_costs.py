"""Where the loader's CPU around each chunk goes, thread by thread and function by function:
what the next change to the read path should remove first (issue 33).

    python -m benchmarks.serial_costs                        # 1 step per chunk, local
    python -m benchmarks.serial_costs --latency-ms 30        # an in-memory copy behind 30 ms

Two passes over the same loader (`build_loader` defaults, batch 32, a consumer that does
nothing), after one warm-up epoch. Unprofiled: each thread's CPU per chunk (main, fetch
loop, decode pool) beside the loader's own counters (`FetchStats` decode CPU, the gather's
time, the loop's busy time). Profiled: cProfile on every thread with each thread's CPU
clock, whose own-time per function, spread over the chunks, says what each thread spends
it on. Profiling adds a cost per call, so the profiled figures are inflated (most where
calls are many and short); the `est.` column takes off each call the profiler's mean cost
on that thread (its profiled time less its unprofiled CPU, over its calls): a rough
figure, but one that adds up to the thread's real CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import pstats
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks.latency_store import LatencyStore, memory_copy
from benchmarks.profile_epoch import ThreadProfiles, function_name
from benchmarks.stores import ensure_store, warm_page_cache
from benchmarks.thread_cpu import PythonThreadsCPU
from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.graph import graph_nodes

HERE = Path(__file__).resolve().parent
ROLES = ("main", "loop", "decode", "other")


def role(thread_name: str) -> str:
    """Which of the loader's threads a thread is, by its name.

    Args:
        thread_name: `threading.Thread.name`.
    """
    if thread_name == "MainThread":
        return "main"
    if thread_name.endswith("-loop"):
        return "loop"
    if "-decode" in thread_name:
        return "decode"
    return "other"


def by_role(seconds: dict[str, float]) -> dict[str, float]:
    """Per-thread seconds added up by `role`.

    Args:
        seconds: seconds by thread name.
    """
    out = dict.fromkeys(ROLES, 0.0)
    for name, spent in seconds.items():
        out[role(name)] += spent
    return out


def epochs(loader: Any, count: int) -> None:
    """Run `count` epochs with a consumer that does nothing.

    Args:
        loader: the loader.
        count: epochs.
    """
    for _ in range(count):
        for _ in loader:
            pass


def unprofiled(loader: Any, fetch: AsyncFetchNode, count: int, path: Path) -> dict[str, Any]:
    """Each role's CPU per chunk and the loader's counters, over `count` epochs.

    Args:
        loader: the loader, warmed up.
        fetch: its fetch node (for `FetchStats`).
        count: epochs.
        path: the store, its page cache warmed first.
    """
    threads = PythonThreadsCPU().__enter__()
    try:
        warm_page_cache(path)
        gc.collect()
        before = fetch.stats.snapshot()
        gather_s = loop_busy = 0.0
        threads.start()
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(count):
            epochs(loader, 1)
            stats = loader.stats()
            gather_s += stats["gather_s"]
            loop_busy += stats["fetch_loop_busy_fraction"] * stats["wall_s"]
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        roles = by_role(threads.by_thread())
    finally:
        threads.__exit__()
    after = fetch.stats.snapshot()
    chunks = after.chunks_read - before.chunks_read
    return {
        "chunks": chunks,
        "wall_s": wall,
        "cpu_s": cpu,
        "roles_s": roles,
        "native_s": max(0.0, cpu - sum(roles.values())),
        "decode_cpu_s": (after.decode_cpu_ns - before.decode_cpu_ns) / 1e9,
        "gather_s": gather_s,
        "loop_busy_s": loop_busy,
        "local_file_reads": after.local_file_reads - before.local_file_reads,
        "gets": after.gets - before.gets,
    }


def profiled(loader: Any, count: int, path: Path) -> dict[str, pstats.Stats]:
    """cProfile of `count` epochs, on each thread's CPU clock, one `Stats` per role.

    Args:
        loader: the loader, warmed up.
        count: epochs.
        path: the store, its page cache warmed first.
    """
    warm_page_cache(path)
    main = cProfile.Profile(time.thread_time)
    with ThreadProfiles(timer=time.thread_time) as threads:  # epochs end their threads
        main.enable()
        epochs(loader, count)
        main.disable()
    out: dict[str, pstats.Stats] = {"main": pstats.Stats(main)}
    for name, profile in threads.named:
        found = out.get(role(name))
        if found is None:
            out[role(name)] = pstats.Stats(profile)
        else:
            found.add(profile)
    return out


def overhead_per_call(stats: pstats.Stats, real_s: float) -> float:
    """The profiler's mean cost per call on this thread, in seconds: its profiled time less
    its unprofiled CPU for as many chunks, over its calls (0 when profiling cost nothing).

    Args:
        stats: one role's profile.
        real_s: the role's unprofiled CPU seconds for as many chunks.
    """
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    profiled_s = sum(v[2] for v in table.values())
    calls = sum(v[1] for v in table.values()) or 1
    return max(0.0, (profiled_s - real_s) / calls)


def function_rows(
    stats: pstats.Stats, chunks: int, real_s: float, top: int, *, cumulative: bool = False
) -> list[str]:
    """A markdown row per function among the `top` by own time (or by cumulative time, the
    library's functions only): calls and microseconds per chunk, profiled, and estimated
    without the profiler: own time less `overhead_per_call` per call (at least 0), or, by
    cumulative time, that time scaled by the thread's unprofiled over profiled CPU.

    Args:
        stats: one role's profile.
        chunks: chunks read while profiled.
        real_s: the role's unprofiled CPU seconds for as many chunks.
        top: rows.
        cumulative: rank the library's functions by cumulative time (which stage).
    """
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    per_call = overhead_per_call(stats, real_s)
    scale = real_s / (sum(v[2] for v in table.values()) or 1.0)
    items = list(table.items())
    if cumulative:
        items = [kv for kv in items if "insitubatch_nodes" in kv[0][0]]
    field = 3 if cumulative else 2
    ranked = sorted(items, key=lambda kv: kv[1][field], reverse=True)[:top]
    rows = []
    for key, (_, calls, own, total, _) in ranked:
        estimate = total * scale if cumulative else max(0.0, own - per_call * calls)
        rows.append(
            f"| `{function_name(key)}` | {calls / chunks:.2f} | {own / chunks * 1e6:.1f} | "
            f"{total / chunks * 1e6:.1f} | {estimate / chunks * 1e6:.1f} |"
        )
    return rows


def module_rows(stats: pstats.Stats, chunks: int, real_s: float, top: int) -> list[str]:
    """A markdown row per source file among the `top` by own time (C functions under their
    name): where a thread's time goes by module, profiled and estimated as `function_rows`.

    Args:
        stats: one role's profile.
        chunks: chunks read while profiled.
        real_s: the role's unprofiled CPU seconds for as many chunks.
        top: rows.
    """
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    per_call = overhead_per_call(stats, real_s)
    files: dict[str, tuple[float, float]] = {}
    for (file, _, function), (_, calls, own, _, _) in table.items():
        where = function if file.startswith("~") else "/".join(Path(file).parts[-2:])
        was = files.get(where, (0.0, 0.0))
        files[where] = (was[0] + own, was[1] + max(0.0, own - per_call * calls))
    ranked = sorted(files.items(), key=lambda kv: kv[1][0], reverse=True)[:top]
    return [
        f"| `{where}` | {own / chunks * 1e6:.1f} | {estimate / chunks * 1e6:.1f} |"
        for where, (own, estimate) in ranked
    ]


def report(counts: dict[str, Any], profiles: dict[str, pstats.Stats], top: int) -> Iterable[str]:
    """The markdown report: the unprofiled table, then each role's functions and modules.

    Args:
        counts: `unprofiled`'s figures.
        profiles: `profiled`'s, for as many chunks as `counts`.
        top: rows per role.
    """
    chunks = counts["chunks"]

    def us(seconds: float) -> str:
        return f"{seconds / chunks * 1e6:.1f}"

    roles = counts["roles_s"]
    decode, gather = counts["decode_cpu_s"], counts["gather_s"]
    yield (
        f"{chunks} chunks in {counts['wall_s']:.2f} s ({chunks / counts['wall_s']:.0f}/s), "
        f"{counts['local_file_reads']} plain file reads, {counts['gets']} gets\n"
    )
    yield "| where | us per chunk | what it is |"
    yield "|---|--:|---|"
    yield f"| all threads (process CPU) | {us(counts['cpu_s'])} | |"
    yield f"| decode pool | {us(roles['decode'])} | reads, checks, decode, counters |"
    yield f"| of which in the sinks (`FetchStats.decode_cpu_ns`) | {us(decode)} | decode, checks |"
    yield f"| of which the rest | {us(roles['decode'] - decode)} | file reads, hops, retries |"
    yield f"| fetch loop thread | {us(roles['loop'])} | scheduling blocks' reads |"
    yield f"| (loop busy, wall) | {us(counts['loop_busy_s'])} | its selector's busy time |"
    yield f"| main thread | {us(roles['main'])} | nodes, gather, consumer |"
    yield f"| of which the gather (wall) | {us(gather)} | `GatherNode` time |"
    yield f"| other Python threads | {us(roles['other'])} | |"
    yield f"| native threads | {us(counts['native_s'])} | store client's |"
    serial = counts["cpu_s"] - roles["decode"]
    yield f"| **outside the decode pool** | **{us(serial)}** | the serial part |"
    for name in ("main", "loop", "decode"):
        stats = profiles.get(name)
        if stats is None:
            continue
        table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
        total = sum(v[2] for v in table.values())
        per_call = overhead_per_call(stats, roles[name])
        yield (
            f"\n#### {name} thread{'s' if name == 'decode' else ''}: "
            f"{us(total)} us per chunk profiled, {us(roles[name])} unprofiled "
            f"(the profiler: {per_call * 1e6:.2f} us per call)\n"
        )
        header = "| function | calls/chunk | own us/chunk | cumulative us/chunk | est. us/chunk |"
        yield header
        yield "|---|--:|--:|--:|--:|"
        yield from function_rows(stats, chunks, roles[name], top)
        yield "\nThe library's functions by cumulative time (which stage):\n"
        yield header
        yield "|---|--:|--:|--:|--:|"
        yield from function_rows(stats, chunks, roles[name], top, cumulative=True)
        yield "\n| module | own us/chunk | est. us/chunk |"
        yield "|---|--:|--:|"
        yield from module_rows(stats, chunks, roles[name], top)


def main(argv: list[str] | None = None) -> None:
    """Print the per-chunk breakdown of the loader's CPU.

    Args:
        argv: command-line arguments (default: `sys.argv[1:]`).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps-per-chunk", type=int, default=1, choices=(1, 4, 24))
    parser.add_argument("--time-steps", type=int, default=960)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="0: the local store")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--cache", type=Path, default=HERE / ".cache")
    args = parser.parse_args(argv)
    path = ensure_store(args.cache, args.time_steps, args.steps_per_chunk, "zstd").resolve()
    source: Any = str(path)
    if args.latency_ms:
        copy = asyncio.run(memory_copy(path))
        source = LatencyStore(copy, args.latency_ms / 1000, str(path), forks=False)
    loader = build_loader(source, list(ERA5_VARIABLES), split="all", batch_size=32, device="cpu")
    fetch = next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))
    epochs(loader, 1)  # warm: arrays opened, block memory touched
    counts = unprofiled(loader, fetch, args.epochs, path)
    profiles = profiled(loader, args.epochs, path)
    loader.close()
    print("\n".join(report(counts, profiles, args.top)))


if __name__ == "__main__":
    main()
