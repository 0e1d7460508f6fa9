"""What `area=` saves (issue 34, part 3): a quarter of the globe against the whole, on the
ERA5-shaped benchmark store (`write_era5_like`: 4 variables on a 1.5-degree 121 x 240
grid, zstd), chunked as the store is (the whole grid in each chunk, as ARCO-ERA5 and
WeatherBench2 keep it) and in 4 x 4 spatial chunks of 31 x 60.

    PYTHONPATH=. python -m benchmarks.area --repeats 3

Three loaders per chunking: the whole grid, a quarter (`area=(90, 0, 1.5, 178.5)`: 60 x
120 of the 121 x 240 points) and a quarter across the 0/360 seam (`area=(45, -90,
-43.5, 88.5)`: 60 x 120 points whose columns the gather reorders). Each repeat runs every
loader once, one after another (interleaved, so a change in the machine's load falls on
all alike): a fresh `build_loader(..., device="cpu", batch_size=32)`, one warm-up epoch,
then --epochs timed ones. Reported: chunks read per epoch (`loader.stats()`), samples/s
(median and range over repeats) and the process's CPU time per sample (every thread: the
steadier figure on a shared host).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import zarr

from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES, write_era5_like

AREAS = {
    "whole globe": None,
    "quarter": (90, 0, 1.5, 178.5),
    "quarter across 0/360": (45, -90, -43.5, 88.5),
}
SPATIAL_CHUNKS = (31, 60)


def write_stores(folder: Path, steps: int, steps_per_chunk: int) -> dict[str, str]:
    """The ERA5-shaped store, and the same values in spatial chunks of `SPATIAL_CHUNKS`."""
    whole = folder / f"era5-{steps}-{steps_per_chunk}.zarr"
    if not whole.exists():
        write_era5_like(whole, time_steps=steps, steps_per_chunk=steps_per_chunk)
    tiled = folder / f"era5-{steps}-{steps_per_chunk}-tiled.zarr"
    if not tiled.exists():
        source = zarr.open_group(str(whole), mode="r")
        target = zarr.open_group(str(tiled), mode="w")
        for name in ("latitude", "longitude"):
            target.create_array(name, data=source[name][...])
        for name in ERA5_VARIABLES:
            array = source[name]
            target.create_array(
                name,
                shape=array.shape,
                chunks=(steps_per_chunk, *SPATIAL_CHUNKS),
                dtype=array.dtype,
                compressors=zarr.codecs.ZstdCodec(level=1),
                dimension_names=("time", "latitude", "longitude"),
            )[...] = array[...]
    return {"whole grid per chunk": str(whole), f"{SPATIAL_CHUNKS} chunks": str(tiled)}


def _run(path: str, area: Any, epochs: int) -> dict[str, float]:
    loader = build_loader(path, split="all", batch_size=32, device="cpu", seed=0, area=area)
    for _ in loader:  # warm-up: the page cache, and the first epoch's start-up
        pass
    samples = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(epochs):
        for batch in loader:
            samples += len(batch["sample_index"])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    shape = tuple(batch["t2m"].shape[1:])
    loader.close()
    return {
        "samples_s": samples / seconds,
        "cpu_us_per_sample": 1e6 * cpu / samples,
        "grid": shape,
    }


def _chunks_per_epoch(path: str, area: Any) -> int:
    """Chunks one epoch reads (`loader.stats()` counts the epoch in progress)."""
    loader = build_loader(path, split="all", batch_size=32, device="cpu", seed=0, area=area)
    for _ in loader:
        pass
    chunks = int(loader.stats()["chunks_read"])
    loader.close()
    return chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=480, help="time steps of the store")
    parser.add_argument("--steps-per-chunk", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=None, help="where the stores go")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    folder = args.folder or Path(tempfile.mkdtemp(prefix="area-"))
    results: list[dict[str, Any]] = []
    print(
        "| chunking | loader | grid | chunks read/epoch | samples/s (median, range) "
        "| vs whole | CPU µs/sample (median) | vs whole |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for chunking, path in write_stores(folder, args.steps, args.steps_per_chunk).items():
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label in AREAS}
        for _ in range(args.repeats):
            for label, area in AREAS.items():
                runs[label].append(_run(path, area, args.epochs))
        whole = statistics.median(r["samples_s"] for r in runs["whole globe"])
        whole_cpu = statistics.median(r["cpu_us_per_sample"] for r in runs["whole globe"])
        for label, area in AREAS.items():
            rates = [r["samples_s"] for r in runs[label]]
            cpu = statistics.median(r["cpu_us_per_sample"] for r in runs[label])
            chunks = _chunks_per_epoch(path, area)
            row = {
                "chunking": chunking,
                "loader": label,
                "area": area,
                "grid": list(runs[label][0]["grid"]),
                "chunks_read": chunks,
                "samples_s": rates,
                "cpu_us_per_sample": [r["cpu_us_per_sample"] for r in runs[label]],
            }
            results.append(row)
            median = statistics.median(rates)
            print(
                f"| {chunking} | {label} | {' x '.join(map(str, row['grid']))} | {chunks:,} "
                f"| {median:,.0f} ({min(rates):,.0f} .. {max(rates):,.0f}) "
                f"| {median / whole:.2f}x | {cpu:,.0f} | {cpu / whole_cpu:.2f}x |",
                flush=True,
            )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
