"""What forcings cost (issue 34, part 2): the ERA5-shaped benchmark store (4 float32
variables on the 1.5 degree grid, 121 x 240, zstd, `cli.synthetic.write_era5_like`) with a
CF time coordinate and named latitude/longitude coordinates, read on the CPU.

    PYTHONPATH=. python -m benchmarks.forcings --repeats 5

Two figures. The forcings' cost per batch: `ForcingsNode` alone over one fixed batch of 32
samples (no read, no gather), median over `--calls` calls, for each of the 4 forcings of
the benchmark (cos_solar_zenith_angle, toa_incident_solar_radiation, year_progress_sin,
day_progress_cos) alone, the 4 together and all 9. And samples/s of `build_loader` without
forcings and with those 4, one warm-up epoch then `--epochs` timed epochs of a fresh loader
per run, the two interleaved `--repeats` times (a change in the machine's load falls on both
alike); the median and the range are reported, with the process's CPU per sample and the
part of it on the thread that iterates the loader (where the forcings are computed on the
CPU; the rest is the fetch and decode threads'), and the load average before and after.
`--torch-threads 1` keeps torch's arithmetic on one thread (on a shared, loaded host its
default of one thread per core spins against the loader's own threads).
"""

from __future__ import annotations

import functools
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zarr
from torchdata.nodes import IterableWrapper

from benchmarks import setting_cost
from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES, write_era5_like
from insitubatch_nodes.core.forcing_names import FORCINGS
from insitubatch_nodes.nodes.forcings import ForcingsNode

FOUR = [
    "cos_solar_zenith_angle",
    "toa_incident_solar_radiation",
    "year_progress_sin",
    "day_progress_cos",
]
BATCH = 32


def write_store(folder: Path, steps: int, steps_per_chunk: int) -> str:
    """The benchmark's store with a CF time coordinate (hourly from 2000-01-01) and the
    latitude/longitude coordinates named as their dimensions, as real ERA5 copies have."""
    path = folder / f"era5-{steps}-c{steps_per_chunk}.zarr"
    if not (path / "zarr.json").exists():
        write_era5_like(path, time_steps=steps, steps_per_chunk=steps_per_chunk)
        group = zarr.open_group(str(path), mode="r+")
        for name in ("latitude", "longitude"):
            values = group[name][...]
            group.create_array(name, data=values, dimension_names=(name,), overwrite=True)
        time_array = group.create_array(
            "time", data=np.arange(steps, dtype=np.int64), dimension_names=("time",)
        )
        time_array.attrs["units"] = "hours since 2000-01-01"
    return str(path)


def node_cost(path: str, names: list[str], calls: int) -> tuple[float, float]:
    """Median seconds `ForcingsNode` takes for one batch of `BATCH` samples: wall-clock and
    the calling thread's CPU (the steadier figure on a shared host)."""
    loader = build_loader(path, split="all", batch_size=BATCH, device="cpu", forcings=names)
    plan = loader_plan_forcings(loader)
    batch = {"sample_index": torch.arange(BATCH, dtype=torch.int64) * 7}
    node = ForcingsNode(IterableWrapper(_repeat(batch)), plan, "cpu")
    node.reset()
    walls, cpus = [], []
    for _ in range(calls):
        start, cpu = time.perf_counter(), time.thread_time()
        next(node)
        walls.append(time.perf_counter() - start)
        cpus.append(time.thread_time() - cpu)
    loader.close()
    return statistics.median(walls), statistics.median(cpus)


def loader_plan_forcings(loader: Any) -> Any:
    """The forcings plan of a built loader's `ForcingsNode`."""
    from insitubatch_nodes.nodes.graph import graph_nodes

    return next(n for n in graph_nodes(loader.root) if isinstance(n, ForcingsNode)).plan


def _repeat(batch: dict[str, torch.Tensor]) -> Any:
    while True:
        yield dict(batch)


def samples_per_second(
    path: str, forcings: list[str] | None, epochs: int
) -> setting_cost.EpochRates:
    """Samples/s of timed epochs, and the process's CPU µs per sample (every thread)."""
    with build_loader(
        path, split="all", batch_size=BATCH, device="cpu", seed=0, forcings=forcings
    ) as loader:
        return setting_cost.timed_epochs(loader, epochs)


def main() -> None:
    flags = setting_cost.parser(__doc__, steps=960, steps_per_chunk=24, epochs=2, repeats=5)
    flags.add_argument("--calls", type=int, default=50)
    flags.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch's intra-op threads (default: its own)",
    )
    args = flags.parse_args()
    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)
    folder = setting_cost.store_folder(args.folder, "forcings-")
    path = write_store(folder, args.steps, args.steps_per_chunk)
    print(
        f"store: {len(ERA5_VARIABLES)} variables, {args.steps} steps, "
        f"{args.steps_per_chunk} per chunk, grid 121 x 240; batch {BATCH}, CPU"
    )
    print("| forcings | ForcingsNode per batch, wall (median) | CPU (median) |")
    print("|---|---|---|")
    print(f"load average: {_load()}", flush=True)
    alone = [(name, [name]) for name in FOUR]
    for label, names in (*alone, ("4", FOUR), ("all 9", list(FORCINGS))):
        wall, cpu = node_cost(path, names, args.calls)
        print(f"| {label} | {1e3 * wall:.1f} ms | {1e3 * cpu:.1f} ms |", flush=True)
    runs = setting_cost.interleaved(
        {
            "none": functools.partial(samples_per_second, path, None, args.epochs),
            "4 forcings": functools.partial(samples_per_second, path, FOUR, args.epochs),
        },
        args.repeats,
    )
    base = statistics.median(r.samples_s for r in runs["none"])
    base_cpu = statistics.median(r.cpu_us_per_sample for r in runs["none"])
    print(
        "| loader | samples/s (median, range) | vs none | CPU µs/sample (median) | vs none "
        "| of it, the iterating thread's |"
    )
    print("|---|---|---|---|---|---|")
    for label, measured in runs.items():
        rates = [r.samples_s for r in measured]
        cpu = statistics.median(r.cpu_us_per_sample for r in measured)
        caller = statistics.median(r.caller_cpu_us_per_sample for r in measured)
        rate = setting_cost.median_range(rates)
        print(
            f"| {label} | {rate} | {setting_cost.change(statistics.median(rates), base)} "
            f"| {cpu:,.0f} | {setting_cost.change(cpu, base_cpu)} | {caller:,.0f} |"
        )
    print(f"load average: {_load()}")


def _load() -> str:
    """The host's load averages (1, 5, 15 minutes): the machine may be shared."""
    return " ".join(f"{v:.2f}" for v in os.getloadavg())


if __name__ == "__main__":
    main()
