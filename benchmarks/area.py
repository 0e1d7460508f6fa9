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

import functools
import json
import statistics
from pathlib import Path
from typing import Any

import zarr

from benchmarks import setting_cost
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


def _run(path: str, area: Any, epochs: int) -> setting_cost.EpochRates:
    with build_loader(path, split="all", batch_size=32, device="cpu", seed=0, area=area) as loader:
        return setting_cost.timed_epochs(loader, epochs)


def _epoch_read(path: str, area: Any) -> tuple[int, list[int]]:
    """Chunks one epoch reads (`loader.stats()` counts the epoch in progress), and the grid
    of its samples."""
    with build_loader(path, split="all", batch_size=32, device="cpu", seed=0, area=area) as loader:
        (grid,) = {tuple(batch["t2m"].shape[1:]) for batch in loader}
        return int(loader.stats()["chunks_read"]), list(grid)


def main() -> None:
    flags = setting_cost.parser(__doc__, steps=480, steps_per_chunk=8, epochs=1, repeats=3)
    flags.add_argument("--json", type=Path, default=None)
    args = flags.parse_args()
    folder = setting_cost.store_folder(args.folder, "area-")
    results: list[dict[str, Any]] = []
    print(
        "| chunking | loader | grid | chunks read/epoch | samples/s (median, range) "
        "| vs whole | CPU µs/sample (median) | vs whole |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for chunking, path in write_stores(folder, args.steps, args.steps_per_chunk).items():
        runs = setting_cost.interleaved(
            {
                label: functools.partial(_run, path, area, args.epochs)
                for label, area in AREAS.items()
            },
            args.repeats,
        )
        whole = statistics.median(r.samples_s for r in runs["whole globe"])
        whole_cpu = statistics.median(r.cpu_us_per_sample for r in runs["whole globe"])
        for label, area in AREAS.items():
            rates = [r.samples_s for r in runs[label]]
            cpu = statistics.median(r.cpu_us_per_sample for r in runs[label])
            chunks, grid = _epoch_read(path, area)
            row = {
                "chunking": chunking,
                "loader": label,
                "area": area,
                "grid": grid,
                "chunks_read": chunks,
                "samples_s": rates,
                "cpu_us_per_sample": [r.cpu_us_per_sample for r in runs[label]],
            }
            results.append(row)
            print(
                f"| {chunking} | {label} | {' x '.join(map(str, grid))} | {chunks:,} "
                f"| {setting_cost.median_range(rates)} | {statistics.median(rates) / whole:.2f}x "
                f"| {cpu:,.0f} | {cpu / whole_cpu:.2f}x |",
                flush=True,
            )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
