"""Where does a fed training step lose its time? One process, one store, one model.

    python -m benchmarks.stall_probe            # needs CUDA

`benchmarks.gpu` measures the data stall (`1 - compute-only time / fed time`); this says
what it is made of. After a warm-up epoch per loader it times, per step:

- compute: the step on one fixed batch (no loader), before and after the rest;
- fed: the step on the loader's batches, at the defaults (CPU decode) and with two cores
  left to the training thread and the loop (decode threads = cores - 2), each
  `--repeats` times, interleaved;
- loader busy, fixed batch: the loader iterated as in `fed`, the step on the fixed batch
  (the loader's activity without its data);
- fed with a 0.5 ms GIL switch interval;

and, for each, the host time the training thread spends inside the step (its kernel
launches, no synchronisation): when that exceeds the GPU's time per step, the training
thread itself is what the GPU waits for. It then profiles 20 steps of `compute` and of
`fed` with torch.profiler: device time per step in kernels and copies (is the GPU slower,
or idle?) and the training thread's host calls that take longest (which wait it makes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.gpu import training_step
from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import write_era5_like

DEVICE = "cuda"


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _timed(steps: int, batches: Any, step: Any) -> tuple[float, float]:
    """Wall ms per step, and the host ms per step inside `step` (launches, no waits)."""
    _sync()
    in_step = 0.0
    start = time.perf_counter()
    for _ in range(steps):
        batch = next(batches)
        entered = time.perf_counter()
        step(batch)
        in_step += time.perf_counter() - entered
    _sync()
    return 1e3 * (time.perf_counter() - start) / steps, 1e3 * in_step / steps


def _forever(loader: Any) -> Any:
    while True:
        yield from loader


def _profile(steps: int, batches: Any, step: Any) -> dict[str, Any]:
    from torch.profiler import ProfilerActivity, profile

    _sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if DEVICE == "cuda" else [])
    with profile(activities=activities) as prof:
        for _ in range(steps):
            step(next(batches))
        _sync()
    events = prof.key_averages()
    device_us = sum(e.self_device_time_total for e in events)
    host = sorted(
        (e for e in events if e.key.startswith("cuda") or e.key.startswith("aten::copy")),
        key=lambda e: e.self_cpu_time_total,
        reverse=True,
    )[:8]
    return {
        "device_ms_per_step": device_us / 1e3 / steps,
        "host_calls": [
            (e.key, e.count, round(e.self_cpu_time_total / 1e3 / steps, 3)) for e in host
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--steps", type=int, default=138)
    parser.add_argument("--time-steps", type=int, default=1460)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the script")
    parser.add_argument("--shuffle", default="pool", choices=["pool", "block"])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each fed setting")
    parser.add_argument("--store", type=Path, default=Path("/tmp/insitubatch-gpu-bench"))
    parser.add_argument("--out", type=Path, default=Path("."))
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    path = args.store / f"era5-{args.time_steps}-24.zarr"
    if not path.exists():
        write_era5_like(path, time_steps=args.time_steps, steps_per_chunk=24)
    step = training_step(args.width, 4, DEVICE)

    def loader(**options: Any) -> Any:
        return build_loader(
            str(path),
            split="all",
            batch_size=32,
            device=DEVICE,
            seed=1,
            shuffle=args.shuffle,
            **options,
        )

    default = loader()
    fixed = None
    for batch in default:  # warm-up: cudnn autotune, allocator, page cache, threads
        step(batch)
        if fixed is None:  # the first batch: a full one (the epoch's last is short)
            fixed = {k: v.clone() for k, v in batch.items() if k != "sample_index"}
    assert fixed is not None

    def repeat_fixed() -> Any:
        while True:
            yield fixed

    def busy_fixed(loader: Any) -> Any:
        for _ in _forever(loader):
            yield fixed

    cores = len(os.sched_getaffinity(0))
    others = {
        f"fed, {max(1, cores - 2)} decode threads": loader(decode_threads=max(1, cores - 2)),
    }
    for other in others.values():
        for batch in other:  # each loader's own warm-up epoch
            step(batch)
    fed = {"fed (defaults)": default, **others}
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in fed}
    timings["compute"] = [_timed(args.steps, repeat_fixed(), step)]
    for _ in range(args.repeats):  # interleaved, so drift touches every setting alike
        for name, fed_by in fed.items():
            timings[name].append(_timed(args.steps, _forever(fed_by), step))
    timings["loader busy, fixed batch"] = [_timed(args.steps, busy_fixed(default), step)]
    timings["compute"].append(_timed(args.steps, repeat_fixed(), step))
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    timings["fed, GIL switch 0.5 ms"] = [_timed(args.steps, _forever(default), step)]
    sys.setswitchinterval(interval)
    for other in others.values():
        other.close()
    rows = {name: sorted(runs)[len(runs) // 2] for name, runs in timings.items()}
    stats = default.stats()
    profiles = {
        "compute": _profile(20, repeat_fixed(), step),
        "fed": _profile(20, _forever(default), step),
    }
    report = {
        "ms_per_step": rows,
        "runs": timings,
        "profiles": profiles,
        "loader_stats": stats,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "stall_probe.json").write_text(json.dumps(report, indent=2, default=str))
    base = min(ms for ms, _ in timings["compute"])
    print(
        f"width {args.width}, shuffle {args.shuffle}, {args.steps} steps a run, median of "
        f"{args.repeats} interleaved runs per fed setting; stall = 1 - compute / this"
    )
    for name, (ms, host_ms) in rows.items():
        spread = " ".join(f"{1 - base / m:.1%}" for m, _ in timings[name])
        print(
            f"{name:36s} {ms:7.2f} ms/step  stall {max(0.0, 1 - base / ms):6.1%}  "
            f"host in step {host_ms:6.2f} ms  (runs: {spread})"
        )
    for name, p in profiles.items():
        print(f"[{name}] device time in kernels and copies: {p['device_ms_per_step']:.2f} ms/step")
        for key, count, ms in p["host_calls"]:
            print(f"    {key:40s} x{count:<6d} {ms:7.3f} ms/step on the host")
    print("loader verdict:", stats.get("limiting_stage"), "-", stats.get("evidence"))


if __name__ == "__main__":
    main()
