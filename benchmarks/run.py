"""One command, one run, one store per scenario: this library against what users write today.

    python -m benchmarks.run            # or: make bench

Each loader runs in a fresh process (clean peak RSS, no shared warm caches beyond the OS
page cache, which every loader gets alike since the store is read once beforehand). Every
batch is checked against per-sample checksums of a direct zarr read, so a fast wrong loader
cannot win. Writes results.json and results.md under --out.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from tqdm import tqdm

from insitubatch_nodes.core.quality import gap_score
from insitubatch_nodes.synthetic import ERA5_GRID, ERA5_VARIABLES, write_era5_like

HERE = Path(__file__).resolve().parent


def checksums(path: str) -> np.ndarray:
    """Per-sample float64 sums of every variable, from a direct zarr read."""
    group = zarr.open_group(path, mode="r")
    return np.stack(
        [
            np.asarray(group[name][...], dtype=np.float64).reshape(group[name].shape[0], -1).sum(1)
            for name in ERA5_VARIABLES
        ],
        axis=1,
    )


def _run_loader(
    name: str,
    path: str,
    latency_s: float,
    batch_size: int,
    max_samples: int,
    truth: np.ndarray,
    queue: Any,
) -> None:
    from benchmarks import latency_store
    from benchmarks.loaders import LOADERS

    factory, options = LOADERS[name]
    rss_before = _peak_rss_mb()
    start = time.perf_counter()
    first = None
    order: list[np.ndarray] = []
    nbytes = 0
    valid = True
    for index, arrays in factory(path, latency_s, ERA5_VARIABLES, batch_size, **options):
        if first is None:
            first = time.perf_counter() - start
        sums = np.stack(
            [arrays[v].reshape(len(index), -1).astype(np.float64).sum(1) for v in ERA5_VARIABLES],
            axis=1,
        )
        valid &= bool(np.array_equal(sums, truth[index]))
        order.append(index)
        nbytes += sum(a.nbytes for a in arrays.values())
        if sum(len(i) for i in order) >= max_samples:
            break
    elapsed = time.perf_counter() - start
    seen = np.concatenate(order)
    queue.put(
        {
            "samples": int(seen.size),
            "seconds": elapsed,
            "samples_per_s": seen.size / elapsed,
            "MB_per_s": nbytes / 1e6 / elapsed,
            "first_batch_s": first,
            "reads_per_sample": latency_store.READS.value / seen.size,
            "peak_rss_MB": _peak_rss_mb(),
            "rss_growth_MB": _peak_rss_mb() - rss_before,
            "shuffle_gap_score": gap_score(seen),
            "valid": valid and len(np.unique(seen)) == seen.size,
        }
    )


def _peak_rss_mb() -> float:
    """This process's high-water RSS (VmHWM; ru_maxrss would carry the parent's over exec).
    DataLoader worker processes are not included."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_isolated(*args: Any) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(target=_run_loader, args=(*args, queue))
    process.start()
    result = queue.get(timeout=3600)
    process.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-steps", type=int, default=480)
    parser.add_argument("--steps-per-chunk", default="1,4,24")
    parser.add_argument("--latency-ms", type=float, default=30.0)
    parser.add_argument("--latency-samples", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--cache", type=Path, default=HERE / ".cache")
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument("--loaders", default="all")
    args = parser.parse_args()

    from benchmarks import ceilings
    from benchmarks.loaders import LOADERS

    names = list(LOADERS) if args.loaders == "all" else args.loaders.split(",")
    chunkings = [int(c) for c in args.steps_per_chunk.split(",")]
    sample_bytes = len(ERA5_VARIABLES) * ERA5_GRID[0] * ERA5_GRID[1] * 4
    rows: list[dict[str, Any]] = []
    plan = [(c, lat) for c in chunkings for lat in (0.0, args.latency_ms / 1000)]
    with tqdm(total=len(plan) * (len(names) + 1), unit="run") as bar:
        for steps, latency_s in plan:
            path = args.cache / f"era5-{args.time_steps}-c{steps}.zarr"
            if not (path / "zarr.json").exists():
                args.cache.mkdir(parents=True, exist_ok=True)
                write_era5_like(path, time_steps=args.time_steps, steps_per_chunk=steps)
            truth = checksums(str(path))  # also warms the page cache for everyone
            scenario = {"steps_per_chunk": steps, "latency_ms": latency_s * 1000}
            max_samples = args.time_steps if latency_s == 0 else args.latency_samples
            if latency_s == 0:
                n = args.time_steps
                seq = ceilings.zarr_sequential(str(path), ERA5_VARIABLES)
                dec = ceilings.decode_only(str(path), ERA5_VARIABLES)
                cpy = ceilings.memcpy(n * sample_bytes)
                for label, seconds in (
                    ("ceiling: zarr sequential read", seq),
                    ("ceiling: decode-only, all cores", dec),
                    ("ceiling: memcpy", cpy),
                ):
                    rows.append(
                        {
                            **scenario,
                            "loader": label,
                            "samples_per_s": n / seconds,
                            "MB_per_s": n * sample_bytes / 1e6 / seconds,
                            "valid": True,
                        }
                    )
            bar.update()
            for name in names:
                bar.set_description(f"{steps} steps/chunk, {latency_s * 1000:.0f} ms: {name}")
                result = run_isolated(
                    name, str(path), latency_s, args.batch_size, max_samples, truth
                )
                rows.append({**scenario, "loader": name, **result})
                bar.update()
    args.out.mkdir(parents=True, exist_ok=True)
    meta = {
        "cpus": os.cpu_count(),
        "time_steps": args.time_steps,
        "batch_size": args.batch_size,
        "grid": ERA5_GRID,
        "variables": ERA5_VARIABLES,
        "codec": "zstd level 1",
    }
    (args.out / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    (args.out / "results.md").write_text(markdown(rows))
    print(markdown(rows))


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = []
    for (steps, latency), group in _groups(rows):
        ours = next((r for r in group if r["loader"] == "insitubatch-nodes"), None)
        lines += [
            f"\n### {steps} steps per chunk, {latency:.0f} ms per read\n",
            "| loader | samples/s | MB/s | ours / this | first batch s | reads/sample | "
            "RSS growth MB | shuffle | valid |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in group:
            ratio = ours["samples_per_s"] / r["samples_per_s"] if ours else float("nan")
            lines.append(
                f"| {r['loader']} | {r['samples_per_s']:.0f} | {r['MB_per_s']:.0f} | "
                f"{ratio:.2f} | {_fmt(r.get('first_batch_s'))} | "
                f"{_fmt(r.get('reads_per_sample'))} | {_fmt(r.get('rss_growth_MB'), 0)} | "
                f"{_fmt(r.get('shuffle_gap_score'))} | {r['valid']} |"
            )
    return "\n".join(lines) + "\n"


def _fmt(value: Any, digits: int = 2) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _groups(rows: list[dict[str, Any]]) -> list[tuple[tuple[int, float], list[dict[str, Any]]]]:
    keys: dict[tuple[int, float], list[dict[str, Any]]] = {}
    for r in rows:
        keys.setdefault((r["steps_per_chunk"], r["latency_ms"]), []).append(r)
    return list(keys.items())


if __name__ == "__main__":
    main()
