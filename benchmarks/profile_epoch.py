"""cProfile of one epoch of the default graph, every thread included, at 1 and 24 steps per
chunk: where the time goes, and how often each function runs per chunk, per batch and per
sample. The point it checks: no Python function's call count grows with samples.

    python -m benchmarks.profile_epoch                 # 480 time steps, 1 and 24 per chunk
    python -m benchmarks.profile_epoch --time-steps 96 --top 10

Profiling adds a fixed cost per Python call, so the times are inflated and only their
proportions mean much; the call counts are exact.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.stores import ensure_store
from insitubatch_nodes import SAMPLE_INDEX_KEY, AsyncFetchNode, build_loader
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES
from insitubatch_nodes.nodes.graph import graph_nodes

HERE = Path(__file__).resolve().parent
FunctionKey = tuple[str, int, str]


class ThreadProfiles:
    """Profiles every thread started while active (the fetch loop and decode pool included)
    by wrapping `threading.Thread.run`; only threads that have finished are counted, in
    `finished` and, with the thread's name, in `named`.

    Args:
        timer: the profiles' clock (`time.thread_time` for each thread's CPU), or None for
            cProfile's default (wall time).
    """

    def __init__(self, timer: Callable[[], float] | None = None) -> None:
        self.finished: list[cProfile.Profile] = []
        self.named: list[tuple[str, cProfile.Profile]] = []
        self.unfinished = 0
        self._timer = timer
        self._running: list[cProfile.Profile] = []
        self._original: Callable[[threading.Thread], None] | None = None

    def __enter__(self) -> ThreadProfiles:
        original = threading.Thread.run
        self._original = original
        profiles = self

        def run(thread: threading.Thread) -> None:
            timer = profiles._timer
            profile = cProfile.Profile() if timer is None else cProfile.Profile(timer)
            profiles._running.append(profile)
            profile.enable()
            try:
                original(thread)
            finally:
                profile.disable()
                profiles._running.remove(profile)
                profiles.finished.append(profile)
                profiles.named.append((thread.name, profile))

        threading.Thread.run = run  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc_info: object) -> None:
        threading.Thread.run = self._original  # type: ignore[assignment, method-assign]
        self.unfinished = len(self._running)


def profile_epoch(path: str, batch_size: int) -> tuple[pstats.Stats, dict[str, Any]]:
    """One epoch, all threads, and the counts to scale the calls by."""
    main = cProfile.Profile()
    loader = build_loader(  # opening the store is once per run, not per epoch: not profiled
        path, list(ERA5_VARIABLES), split="all", batch_size=batch_size, device="cpu", seed=0
    )
    fetch = next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))
    with ThreadProfiles() as threads:
        start = time.perf_counter()
        main.enable()
        batches = samples = 0
        for batch in loader:  # exhaustion closes the graph and joins its threads
            batches += 1
            samples += len(batch[SAMPLE_INDEX_KEY])
        main.disable()
        wall = time.perf_counter() - start
    stats = pstats.Stats(main)
    for profile in threads.finished:
        stats.add(profile)
    counts = {
        "samples": samples,
        "batches": batches,
        "chunks": fetch.stats.chunks_read,
        "wall_s": wall,
        "threads_profiled": len(threads.finished),
        "threads_unfinished": threads.unfinished,
    }
    return stats, counts


def summary(stats: pstats.Stats, counts: dict[str, Any], top: int) -> str:
    table: dict[FunctionKey, tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    chunks, batches, samples = counts["chunks"], counts["batches"], counts["samples"]

    def rows(title: str, keys: list[FunctionKey]) -> list[str]:
        out = [
            f"\n{title}\n",
            "| function | calls | own s | cumulative s | per chunk | per batch | per sample |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for key in keys:
            _, calls, own, cumulative, _ = table[key]
            out.append(
                f"| `{function_name(key)}` | {calls} | {own:.3f} | {cumulative:.3f} | "
                f"{calls / chunks:.2f} | {calls / batches:.2f} | {calls / samples:.3f} |"
            )
        return out

    def ranked(field: int) -> list[FunctionKey]:
        return sorted(table, key=lambda k: table[k][field], reverse=True)[:top]

    python_keys = [k for k in table if not k[0].startswith("~")]  # "~": C functions
    most_called = sorted(python_keys, key=lambda k: table[k][1], reverse=True)
    busiest = most_called[0]
    per_sample = [k for k in most_called if table[k][1] >= samples]
    lines = [
        f"{samples} samples, {batches} batches, {chunks} chunk reads; "
        f"{counts['wall_s']:.2f} s under the profiler; "
        f"{counts['threads_profiled']} threads profiled"
        + (
            f", {counts['threads_unfinished']} still running (not counted)"
            if counts["threads_unfinished"]
            else ""
        ),
        *rows("By cumulative time (all threads added):", ranked(3)),
        *rows("By own time:", ranked(2)),
        *rows("Most-called Python functions:", most_called[:top]),
        f"\nThe most-called Python function, `{function_name(busiest)}`, runs "
        f"{table[busiest][1] / samples:.3f} times per sample "
        f"({table[busiest][1] / chunks:.2f} per chunk read). Python functions called at "
        f"least once per sample: {len(per_sample)}"
        + (": " + ", ".join(f"`{function_name(k)}`" for k in per_sample[:5]) if per_sample else ".")
        + (", ..." if len(per_sample) > 5 else ""),
    ]
    return "\n".join(lines)


def scaling(fine: pstats.Stats, coarse: pstats.Stats, samples: int, ratio: int) -> str:
    """Python functions run at least once per sample in the finely chunked epoch, where a
    chunk is a sample: are they still run once per sample with `ratio`x fewer chunks?"""
    fine_table: dict[FunctionKey, Any] = fine.stats  # type: ignore[attr-defined]
    coarse_table: dict[FunctionKey, Any] = coarse.stats  # type: ignore[attr-defined]
    hot = [k for k, v in fine_table.items() if not k[0].startswith("~") and v[1] >= samples]
    hot.sort(key=lambda k: fine_table[k][1], reverse=True)
    still = [k for k in hot if coarse_table.get(k, (0, 0))[1] >= samples]
    lines = [
        f"\n## Per chunk, not per sample\n\nSame {samples} samples, {ratio}x fewer chunks: "
        f"{len(hot)} Python functions run at least once per sample at the finer chunking; at "
        f"the coarser one, {len(still)} of them still do" + (":" if still else "."),
        *[
            f"- `{function_name(k)}`: {fine_table[k][1]} -> {coarse_table.get(k, (0, 0))[1]} calls"
            for k in still
        ],
        "\nThe most-called of them, fine -> coarse:",
        *[
            f"- `{function_name(k)}`: {fine_table[k][1]} -> {coarse_table.get(k, (0, 0))[1]} calls"
            for k in hot[:5]
        ],
    ]
    return "\n".join(lines)


def function_name(key: FunctionKey) -> str:
    file, line, function = key
    if file.startswith("~"):
        return function
    short = "/".join(Path(file).parts[-2:])
    return f"{short}:{line}({function})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-steps", type=int, default=480)
    parser.add_argument("--steps-per-chunk", default="1,24")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--cache", type=Path, default=HERE / ".cache")
    args = parser.parse_args()
    profiled: dict[int, pstats.Stats] = {}
    for steps in (int(s) for s in args.steps_per_chunk.split(",")):
        path = ensure_store(args.cache, args.time_steps, steps, "zstd")
        profiled[steps], counts = profile_epoch(str(path), args.batch_size)
        print(f"\n## {steps} step{'s' if steps > 1 else ''} per chunk (zstd, local)\n")
        print(summary(profiled[steps], counts, args.top))
    if len(profiled) > 1:
        fine, coarse = min(profiled), max(profiled)
        print(scaling(profiled[fine], profiled[coarse], args.time_steps, coarse // fine))


if __name__ == "__main__":
    main()
