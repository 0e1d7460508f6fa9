"""Data stall behind a step that leaves the host idle: the GPU question, asked on a CPU.

    python -m benchmarks.stall                   # ERA5-shaped, 24 steps per chunk, zstd
    python -m benchmarks.stall --steps-per-chunk 1 --time-steps 480

A GPU training step mostly leaves its Python thread waiting on kernels, with the GIL
released. This stands in for it with `time.sleep(step)` on the consumer's thread, so the
overlap machinery (`device_prefetch` batches gathered by `PinToDeviceNode`'s producer
thread while the step runs) can be measured where there is no GPU: the data-stall
fraction is `1 - steps * step / fed time`, as in `benchmarks.gpu`. The step is set from
the loader-alone time per batch measured in the same run (x0.5, x1, x2): a loader can hide
its work only behind a step at least as long as that work. Three loaders per step: no
prefetch (gather on the consumer's thread), 2 batches prefetched by the producer thread,
and that with `read_across_epochs` (the next epoch's first blocks read while this one
ends; otherwise each epoch's first batch waits for a whole block). Each is timed over
--epochs epochs after a warm-up epoch; the median of --repeats runs is reported.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import write_era5_like

STEP_FACTORS = (0.5, 1.0, 2.0)
LOADERS = ((0, False), (2, False), (2, True))  # (device_prefetch, read_across_epochs)


def _epochs(loader: Any, epochs: int, step_s: float) -> tuple[float, int]:
    """Seconds for `epochs` epochs with a `step_s` sleep per batch, and the batch count."""
    batches = 0
    start = time.perf_counter()
    for _ in range(epochs):
        for _batch in loader:
            if step_s:
                time.sleep(step_s)
            batches += 1
    return time.perf_counter() - start, batches


def measure(path: Path, args: argparse.Namespace) -> dict[str, Any]:
    def loader(prefetch: int, across: bool = False) -> Any:
        return build_loader(
            str(path),
            split="all",
            batch_size=args.batch_size,
            device="cpu",
            seed=1,
            device_prefetch=prefetch,
            read_across_epochs=across,
        )

    alone = loader(0)
    _epochs(alone, 1, 0.0)  # warm-up: page cache, first touch of block memory
    runs = [_epochs(alone, args.epochs, 0.0) for _ in range(args.repeats)]
    loader_s = statistics.median(seconds / batches for seconds, batches in runs)
    rows = []
    for factor in STEP_FACTORS:
        step_s = factor * loader_s
        for prefetch, across in LOADERS:
            fed = loader(prefetch, across)
            _epochs(fed, 1, step_s)
            timed = [_epochs(fed, args.epochs, step_s) for _ in range(args.repeats)]
            stalls = [1 - batches * step_s / seconds for seconds, batches in timed]
            rows.append(
                {
                    "step_over_loader": factor,
                    "step_ms": 1e3 * step_s,
                    "device_prefetch": prefetch,
                    "read_across_epochs": across,
                    "fed_ms_per_batch": 1e3 * statistics.median(s / b for s, b in timed),
                    "data_stall": max(0.0, statistics.median(stalls)),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            fed.close()
    return {"loader_ms_per_batch": 1e3 * loader_s, "rows": rows}


def render(report: dict[str, Any]) -> str:
    lines = [
        f"store: {report['store']}; batch {report['batch_size']}; loader alone "
        f"{report['loader_ms_per_batch']:.2f} ms/batch",
        "",
        "| step / loader alone | step ms | device_prefetch | read across epochs "
        "| fed ms/batch | data stall |",
        "|---:|---:|---:|---|---:|---:|",
    ]
    lines += [
        f"| {r['step_over_loader']:.1f} | {r['step_ms']:.2f} | {r['device_prefetch']} | "
        f"{'yes' if r['read_across_epochs'] else 'no'} | {r['fed_ms_per_batch']:.2f} | "
        f"{r['data_stall']:.1%} |"
        for r in report["rows"]
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--time-steps", type=int, default=960)
    parser.add_argument("--steps-per-chunk", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--store", type=Path, default=Path("/tmp/insitubatch-stall-bench"))
    args = parser.parse_args()
    path = args.store / f"era5-{args.time_steps}-{args.steps_per_chunk}.zarr"
    if not path.exists():
        write_era5_like(path, time_steps=args.time_steps, steps_per_chunk=args.steps_per_chunk)
    report = {
        "store": {"time_steps": args.time_steps, "steps_per_chunk": args.steps_per_chunk},
        "batch_size": args.batch_size,
        **measure(path, args),
    }
    print(render(report))


if __name__ == "__main__":
    main()
