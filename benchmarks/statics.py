"""What static fields cost (issue 34): the ERA5-shaped store (4 surface fields, 121 x 240,
zstd) read with its 2 static fields (`land_sea_mask`, `geopotential_at_surface`) against
the same fields without them, unstacked and stacked, batches on the CPU.

    PYTHONPATH=. python -m benchmarks.statics --repeats 3

Each repeat runs every configuration once, one after another (interleaved, so a change in
the machine's load falls on all of them alike): a fresh loader, one warm-up epoch, then
--epochs timed epochs; the median and the range over repeats are reported, with the CPU
time per sample (the process's, every thread), the steadier figure on a shared host.
Unstacked, a static is a broadcast view of one array (no copy per sample); stacked, it is
copied into every batch's channels, so its cost is that copy. Since the epochs' figures
carry the host's load, the script also times those per-batch operations alone (a batch of
32 on the ERA5 grid, the median of 50): the view, and the stack with and without the two
static channels.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks import setting_cost
from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import (
    ERA5_GRID,
    ERA5_VARIABLES,
    WB2_STATICS,
    write_era5_like,
)

CONFIGS = (  # (label, variables, build_loader settings)
    ("fields", list(ERA5_VARIABLES), {}),
    ("fields + 2 statics", [*ERA5_VARIABLES, *WB2_STATICS], {}),
    ("fields, stacked", list(ERA5_VARIABLES), {"stack": True}),
    ("fields + 2 statics, stacked", [*ERA5_VARIABLES, *WB2_STATICS], {"stack": True}),
)


def _run(path: str, variables: list[str], epochs: int, **settings: Any) -> setting_cost.EpochRates:
    with build_loader(
        path, variables, "all", batch_size=32, device="cpu", seed=0, **settings
    ) as loader:
        return setting_cost.timed_epochs(loader, epochs)


def _median_ms(work: Any, times: int = 50) -> float:
    taken = []
    for _ in range(times):
        start = time.perf_counter()
        work()
        taken.append(time.perf_counter() - start)
    return 1e3 * statistics.median(taken)


def per_batch_costs(batch: int = 32) -> dict[str, float]:
    """Milliseconds per batch of what statics add, alone: the broadcast view of one static
    (unstacked), and the stack of the 4 fields with and without the 2 static channels."""
    rng = np.random.default_rng(0)
    fields = [rng.standard_normal((batch, 1, *ERA5_GRID), dtype=np.float32) for _ in range(4)]
    static = torch.from_numpy(rng.standard_normal(ERA5_GRID, dtype=np.float32))
    views = [np.broadcast_to(static.numpy(), (batch, 1, *ERA5_GRID)) for _ in WB2_STATICS]
    return {
        "view": _median_ms(lambda: static.expand(batch, *static.shape)),
        "stack 4 fields": _median_ms(lambda: np.concatenate(fields, axis=1)),
        "stack 4 fields + 2 statics": _median_ms(lambda: np.concatenate(fields + views, axis=1)),
    }


def main() -> None:
    flags = setting_cost.parser(__doc__, steps=480, steps_per_chunk=8, epochs=1, repeats=3)
    flags.add_argument("--json", type=Path, default=None)
    args = flags.parse_args()
    folder = setting_cost.store_folder(args.folder, "statics-")
    path = folder / f"era5-{args.steps}-c{args.steps_per_chunk}-statics.zarr"
    if not path.exists():
        write_era5_like(
            path, time_steps=args.steps, steps_per_chunk=args.steps_per_chunk, statics=WB2_STATICS
        )
    runs = setting_cost.interleaved(
        {
            label: functools.partial(_run, str(path), variables, args.epochs, **settings)
            for label, variables, settings in CONFIGS
        },
        args.repeats,
    )
    print(
        "| loader | samples/s (median, range) | vs without statics "
        "| CPU µs/sample (median) | vs without statics |"
    )
    print("|---|---|---|---|---|")
    results = []
    for label, _, settings in CONFIGS:
        base = "fields, stacked" if settings.get("stack") else "fields"
        rates = [r.samples_s for r in runs[label]]
        cpu = statistics.median(r.cpu_us_per_sample for r in runs[label])
        base_rate = statistics.median(r.samples_s for r in runs[base])
        base_cpu = statistics.median(r.cpu_us_per_sample for r in runs[base])
        results.append({"loader": label, "samples_s": rates, "cpu_us_per_sample": cpu})
        print(
            f"| {label} | {setting_cost.median_range(rates)} "
            f"| {setting_cost.change(statistics.median(rates), base_rate)} | {cpu:,.0f} "
            f"| {setting_cost.change(cpu, base_cpu)} |",
            flush=True,
        )
    costs = per_batch_costs()
    print()
    print("| per batch of 32, alone | ms (median of 50) |")
    print("|---|---|")
    for label, ms in costs.items():
        print(f"| {label} | {ms:.3f} |")
    if args.json is not None:
        args.json.write_text(json.dumps({"runs": results, "per_batch_ms": costs}, indent=1))


if __name__ == "__main__":
    main()
