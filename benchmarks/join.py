"""What a join of stores costs (issue 37): a pressure-level store chunked 24 steps and a
surface store chunked 1 step read as one source, against the same variables in one store,
each variable chunked as in the join.

    PYTHONPATH=. python -m benchmarks.join                  # local and behind 30 ms
    PYTHONPATH=. python -m benchmarks.join --quick          # smoke run: 240 steps, 1 repeat
    PYTHONPATH=. python -m benchmarks.join --latency-ms 0 --repeats 5 --epochs 3

Three sources, the same fields (`t`, `z` on 3 levels; `t2m`, `msl`), 6-hourly, on a 32 x 64
grid: `one store` (every variable in one store), `join, exact` (the same dates in a
pressure-level and a surface store) and `join, inner +8` (the pressure-level store starts
8 steps, a third of a chunk, before the surface store: the units start at the phase where
its chunks start, `core.unit_phase`, so each is read once an epoch and
`chunk_amplification` is 1; units at step 0 would read each about twice). Locally, or
each store behind `benchmarks.latency_store`'s delay per get. Each repeat runs every
source once, one after another (`benchmarks.setting_cost`): a fresh loader, one warm-up
epoch, then `--epochs` timed epochs (batch 32, CPU batches, a consumer that does
nothing); the median and range over repeats, and each join's ratio to the one
store, are reported. `--steps-per-chunk` is not used: the chunkings are the join's.
"""

from __future__ import annotations

import functools
import json
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from benchmarks import setting_cost
from benchmarks.latency_store import open_latency_store
from insitubatch_nodes import build_loader

GRID = (32, 64)
LEVELS = [500, 850, 1000]
PRESSURE = ("t", "z")
SURFACE = ("t2m", "msl")
OFFSET = 8  # steps the pressure store starts before the surface store in `join, inner +8`


def _fields(steps: int, first: int, names: tuple[str, ...], levels: bool) -> xr.Dataset:
    rng = np.random.default_rng(len(names) + first)
    times = pd.date_range("2020-01-01", periods=first + steps, freq="6h")[first:]
    lat, lon = np.linspace(90, -90, GRID[0]), np.arange(GRID[1]) * 360.0 / GRID[1]
    grid_dims = ("latitude", "longitude")
    dims = ("time", "level", *grid_dims) if levels else ("time", *grid_dims)
    shape = (steps, len(LEVELS), *GRID) if levels else (steps, *GRID)
    coords: dict[str, Any] = {"time": times, "latitude": lat, "longitude": lon}
    if levels:
        coords["level"] = LEVELS
    return xr.Dataset(
        {n: (dims, rng.standard_normal(shape, dtype="float32")) for n in names}, coords=coords
    )


def _write(ds: xr.Dataset, path: Path, chunks: dict[str, int]) -> str:
    encoding = {n: {"chunks": (chunks[n], *ds[n].shape[1:])} for n in ds.data_vars}
    ds.to_zarr(path, mode="w", encoding=encoding, zarr_format=3, consolidated=True)
    return str(path)


def make_sources(folder: Path, steps: int) -> dict[str, list[str]]:
    """The three sources' store paths: one store, an exact join, an inner join +8."""
    chunks = {**dict.fromkeys(PRESSURE, 24), **dict.fromkeys(SURFACE, 1)}
    pressure = _fields(steps, OFFSET, PRESSURE, levels=True)
    surface = _fields(steps, OFFSET, SURFACE, levels=False)
    early = _fields(steps + OFFSET, 0, PRESSURE, levels=True)
    return {
        "one store": [_write(xr.merge([pressure, surface]), folder / "one.zarr", chunks)],
        "join, exact": [
            _write(pressure, folder / "pl.zarr", chunks),
            _write(surface, folder / "sfc.zarr", chunks),
        ],
        "join, inner +8": [
            _write(early, folder / "pl_early.zarr", chunks),
            str(folder / "sfc.zarr"),
        ],
    }


def _run(paths: list[str], latency_s: float, epochs: int) -> dict[str, float]:
    stores: list[Any] = [open_latency_store(p, latency_s) if latency_s else p for p in paths]
    source = stores[0] if len(stores) == 1 else stores
    with build_loader(
        source, [*PRESSURE, *SURFACE], "all", batch_size=32, device="cpu", seed=0, join="inner"
    ) as loader:
        rates = setting_cost.timed_epochs(loader, epochs)
        amplification = float(loader.stats().get("chunk_amplification", float("nan")))
    return {
        "samples_s": rates.samples_s,
        "cpu_us_per_sample": rates.cpu_us_per_sample,
        "chunk_amplification": amplification,
    }


def main() -> None:
    flags = setting_cost.parser(__doc__, steps=480, steps_per_chunk=24, epochs=2, repeats=3)
    flags.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 30.0])
    flags.add_argument("--quick", action="store_true", help="240 steps, 1 repeat, 1 epoch")
    flags.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = flags.parse_args()
    if args.quick:
        args.steps, args.repeats, args.epochs = 240, 1, 1
    results: dict[str, Any] = {"steps": args.steps, "epochs": args.epochs, "tables": {}}
    sources = make_sources(setting_cost.store_folder(args.folder, "join-"), args.steps)
    for latency_ms in args.latency_ms:
        runs = setting_cost.interleaved(
            {
                name: functools.partial(_run, paths, latency_ms / 1000, args.epochs)
                for name, paths in sources.items()
            },
            args.repeats,
        )
        results["tables"][f"{latency_ms:g} ms"] = runs
        base = statistics.median(r["samples_s"] for r in runs["one store"])
        where = "local" if not latency_ms else f"behind {latency_ms:g} ms per get"
        print(f"\n{where}, {args.steps} steps, medians of {args.repeats} (range)")
        print("| source | samples/s | vs one store | CPU us/sample | chunk amplification |")
        print("|---|---|---|---|---|")
        for name, found in runs.items():
            rates = [r["samples_s"] for r in found]
            cpu = statistics.median(r["cpu_us_per_sample"] for r in found)
            amplification = statistics.median(r["chunk_amplification"] for r in found)
            print(
                f"| {name} | {setting_cost.median_range(rates)} | "
                f"{statistics.median(rates) / base:.2f} | {cpu:.0f} | {amplification:.2f} |"
            )
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
