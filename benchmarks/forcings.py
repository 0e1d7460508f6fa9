"""What forcings cost (issue 34, part 2): the ERA5-shaped benchmark store (4 float32
variables on the 1.5 degree grid, 121 x 240, zstd, `cli.synthetic.write_era5_like`) with a
CF time coordinate and named latitude/longitude coordinates, read on the CPU.

    PYTHONPATH=. python -m benchmarks.forcings --repeats 5

Two figures. The forcings' cost per batch: `ForcingsNode` alone over one fixed batch of 32
samples (no read, no gather), median over `--calls` calls, for the 4 forcings of the
benchmark (cos_solar_zenith_angle, toa_incident_solar_radiation, year_progress_sin,
day_progress_cos) and for all 9. And samples/s of `build_loader` without forcings and with
those 4, one warm-up epoch then `--epochs` timed epochs of a fresh loader per run, the two
interleaved `--repeats` times (a change in the machine's load falls on both alike);
the median and the range are reported. `--torch-threads 1` keeps torch's arithmetic on one
thread (on a shared, loaded host its default of one thread per core spins against the
loader's own threads).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zarr
from torchdata.nodes import IterableWrapper

from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES, write_era5_like
from insitubatch_nodes.core.forcings import FORCINGS
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


def samples_per_second(path: str, forcings: list[str] | None, epochs: int) -> tuple[float, float]:
    """Samples/s of timed epochs, and the process's CPU µs per sample (every thread)."""
    loader = build_loader(
        path, split="all", batch_size=BATCH, device="cpu", seed=0, forcings=forcings
    )
    for _ in loader:  # warm-up: the start-up is not the forcings'
        pass
    samples = 0
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(epochs):
        for batch in loader:
            samples += len(batch["sample_index"])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    loader.close()
    return samples / seconds, 1e6 * cpu / samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=960, help="time steps of the store")
    parser.add_argument("--steps-per-chunk", type=int, default=24)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--folder", type=Path, default=None, help="where the store goes")
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=None,
        help="torch's intra-op threads (default: its own)",
    )
    args = parser.parse_args()
    if args.torch_threads is not None:
        torch.set_num_threads(args.torch_threads)
    folder = args.folder or Path(tempfile.mkdtemp(prefix="forcings-"))
    path = write_store(folder, args.steps, args.steps_per_chunk)
    print(
        f"store: {len(ERA5_VARIABLES)} variables, {args.steps} steps, "
        f"{args.steps_per_chunk} per chunk, grid 121 x 240; batch {BATCH}, CPU"
    )
    print("| forcings | ForcingsNode per batch, wall (median) | CPU (median) |")
    print("|---|---|---|")
    for label, names in (("4", FOUR), ("all 9", list(FORCINGS))):
        wall, cpu = node_cost(path, names, args.calls)
        print(f"| {label} | {1e3 * wall:.1f} ms | {1e3 * cpu:.1f} ms |", flush=True)
    runs: dict[str, list[tuple[float, float]]] = {"none": [], "4 forcings": []}
    for _ in range(args.repeats):
        runs["none"].append(samples_per_second(path, None, args.epochs))
        runs["4 forcings"].append(samples_per_second(path, FOUR, args.epochs))
    base = statistics.median(rate for rate, _ in runs["none"])
    base_cpu = statistics.median(cpu for _, cpu in runs["none"])
    print("| loader | samples/s (median, range) | vs none | CPU µs/sample (median) | vs none |")
    print("|---|---|---|---|---|")
    for label, measured in runs.items():
        rates = [rate for rate, _ in measured]
        median, cpu = statistics.median(rates), statistics.median(c for _, c in measured)
        print(
            f"| {label} | {median:,.0f} ({min(rates):,.0f} .. {max(rates):,.0f}) "
            f"| {100 * (median / base - 1):+.1f}% | {cpu:,.0f} "
            f"| {100 * (cpu / base_cpu - 1):+.1f}% |"
        )


if __name__ == "__main__":
    main()
