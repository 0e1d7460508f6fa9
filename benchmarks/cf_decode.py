"""What CF decoding costs (issue 32): a packed int16 store (ERA5's encoding: `scale_factor`,
`add_offset`, `_FillValue`) read with decoding on (the default) against `decode_cf=False`,
and against the same values stored as float32, at 1 and 24 steps per chunk, local and
behind a fixed read latency (`benchmarks.latency_store`).

    PYTHONPATH=. python -m benchmarks.cf_decode --repeats 5
    PYTHONPATH=. python -m benchmarks.cf_decode --latency-ms 0 30 --steps-per-chunk 1 24

Each repeat runs every configuration once, one after another (interleaved, so a change in
the machine's load falls on all of them alike), one warm-up epoch then --epochs timed
epochs of a fresh loader, on the CPU; the median and the range over repeats are reported.
The target: decoding costs <= 10% of an epoch at one step per chunk and <= 5% at 24.
The CPU time per sample (the process's, every thread) is the steadier figure on a shared
host. Memory is the block memory the loader held at most (`loader.stats()`), and the bytes of
one sample as stored and as batches hold it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.latency_store import open_latency_store
from insitubatch_nodes import build_loader

GRID = (64, 128)
PACKING = {"dtype": "int16", "scale_factor": 0.002, "add_offset": 273.15, "_FillValue": -32767}
CONFIGS = (  # (label, store, build_loader settings)
    ("int16, decode on", "int16", {}),
    ("int16, decode_cf=False", "int16", {"decode_cf": False}),
    ("int16, decode on, dtype=float32", "int16", {"dtype": "float32"}),
    ("float32 store", "float32", {}),
)


def _values(steps: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    lat = np.linspace(-1.0, 1.0, GRID[0])[:, None]
    field = 273.15 + 30.0 * np.cos(np.pi * lat / 2) + rng.normal(0.0, 2.0, (steps, *GRID))
    field[rng.random(field.shape) < 0.01] = np.nan  # 1% missing: the fill value is stored
    return field


def write_stores(folder: Path, steps: int, steps_per_chunk: int) -> dict[str, str]:
    """The same values stored packed as int16 and as float32 (xarray's `to_zarr`, v3)."""
    import xarray as xr

    values = _values(steps)
    times = np.datetime64("2000-01-01T00", "ns") + np.arange(steps) * np.timedelta64(1, "h")
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), values)}, coords={"time": times})
    chunks = (steps_per_chunk, *GRID)
    paths = {}
    for name, encoding in (("int16", PACKING), ("float32", {"dtype": "float32"})):
        path = folder / f"{name}-{steps_per_chunk}.zarr"
        if not path.exists():
            ds.to_zarr(
                str(path),
                zarr_format=3,
                encoding={"t2m": {**encoding, "chunks": chunks}},
                consolidated=False,
            )
        paths[name] = str(path)
    return paths


def _run(path: str, latency_ms: float, epochs: int, **settings: Any) -> dict[str, float]:
    store = open_latency_store(path, latency_ms / 1000)
    loader = build_loader(store, ["t2m"], "all", batch_size=32, device="cpu", seed=0, **settings)
    for _ in loader:  # warm-up: the first epoch's start-up is not decoding's
        pass
    samples, held = 0, 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(epochs):
        for batch in loader:
            samples += len(batch["sample_index"])
            held = max(held, loader.stats()["memory_held_bytes"])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    sample = batch["t2m"][0]
    loader.close()
    return {
        "samples_s": samples / seconds,
        "cpu_us_per_sample": 1e6 * cpu / samples,
        "memory_held_bytes": held,
        "sample_bytes": sample.numel() * sample.element_size(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=960, help="time steps of each store")
    parser.add_argument("--steps-per-chunk", type=int, nargs="+", default=[1, 24])
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 30.0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--folder", type=Path, default=None, help="where the stores go")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="cf-decode-"))
    results: list[dict[str, Any]] = []
    print(
        "| steps/chunk | latency | loader | samples/s (median, range) | vs decode_cf=False "
        "| CPU µs/sample (median) | vs decode_cf=False | block memory held | bytes/sample |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for steps_per_chunk in args.steps_per_chunk:
        paths = write_stores(folder, args.steps, steps_per_chunk)
        for latency in args.latency_ms:
            runs: dict[str, list[dict[str, float]]] = {label: [] for label, _, _ in CONFIGS}
            for _ in range(args.repeats):
                for label, store, settings in CONFIGS:
                    runs[label].append(_run(paths[store], latency, args.epochs, **settings))
            off = statistics.median(r["samples_s"] for r in runs["int16, decode_cf=False"])
            off_cpu = statistics.median(
                r["cpu_us_per_sample"] for r in runs["int16, decode_cf=False"]
            )
            for label, _, _ in CONFIGS:
                rates = [r["samples_s"] for r in runs[label]]
                median = statistics.median(rates)
                cpu = statistics.median(r["cpu_us_per_sample"] for r in runs[label])
                row = {
                    "steps_per_chunk": steps_per_chunk,
                    "latency_ms": latency,
                    "loader": label,
                    "samples_s": rates,
                    "cost_vs_stored": 1 - median / off,
                    "cpu_us_per_sample": [r["cpu_us_per_sample"] for r in runs[label]],
                    "cpu_vs_stored": cpu / off_cpu - 1,
                    "memory_held_bytes": max(r["memory_held_bytes"] for r in runs[label]),
                    "sample_bytes": runs[label][0]["sample_bytes"],
                }
                results.append(row)
                print(
                    f"| {steps_per_chunk} | {latency:g} ms | {label} | {median:,.0f} "
                    f"({min(rates):,.0f} .. {max(rates):,.0f}) "
                    f"| {-100 * row['cost_vs_stored']:+.1f}% "
                    f"| {cpu:,.0f} | {100 * row['cpu_vs_stored']:+.1f}% "
                    f"| {row['memory_held_bytes'] / 2**20:.1f} MiB | {row['sample_bytes']:,} |",
                    flush=True,
                )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
