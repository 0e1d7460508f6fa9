"""Where does a fed training step lose its time? One process, one store, one model.

    python -m benchmarks.stall_probe            # needs CUDA

`benchmarks.gpu` measures the data stall (`1 - compute-only time / fed time`); this says
what it is made of. After a warm-up epoch it times, per step:

- compute: the step on one fixed batch (no loader);
- fed: the step on the loader's batches (defaults, CPU decode);
- loader busy, fixed batch: the loader iterated as in `fed`, the step on the fixed batch
  (the loader's activity without its data);
- fed with 2 decode threads, and fed with a 0.5 ms GIL switch interval;

then profiles 20 steps of `compute` and of `fed` with torch.profiler: device time per
step in kernels and copies (is the GPU slower, or idle?) and the training thread's host
calls that take longest (which wait it makes).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.gpu import training_step
from insitubatch_nodes import build_loader
from insitubatch_nodes.synthetic import write_era5_like

DEVICE = "cuda"


def _sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _timed(steps: int, batches: Any, step: Any) -> float:
    _sync()
    start = time.perf_counter()
    for _ in range(steps):
        step(next(batches))
    _sync()
    return 1e3 * (time.perf_counter() - start) / steps


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
        return build_loader(str(path), split="all", batch_size=32, device=DEVICE, seed=1, **options)

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

    rows: dict[str, float] = {}
    rows["compute"] = _timed(args.steps, repeat_fixed(), step)
    rows["fed"] = _timed(args.steps, _forever(default), step)
    rows["loader busy, fixed batch"] = _timed(args.steps, busy_fixed(default), step)
    rows["compute again"] = _timed(args.steps, repeat_fixed(), step)
    two = loader(decode_threads=2)
    rows["fed, 2 decode threads"] = _timed(args.steps, _forever(two), step)
    two.close()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.0005)
    rows["fed, GIL switch 0.5 ms"] = _timed(args.steps, _forever(default), step)
    sys.setswitchinterval(interval)
    stats = default.stats()
    profiles = {
        "compute": _profile(20, repeat_fixed(), step),
        "fed": _profile(20, _forever(default), step),
    }
    report = {"ms_per_step": rows, "profiles": profiles, "loader_stats": stats}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "stall_probe.json").write_text(json.dumps(report, indent=2, default=str))
    base = rows["compute"]
    print(f"width {args.width}, {args.steps} steps each; stall = 1 - compute / this")
    for name, ms in rows.items():
        print(f"{name:28s} {ms:7.2f} ms/step  stall {max(0.0, 1 - base / ms):6.1%}")
    for name, p in profiles.items():
        print(f"[{name}] device time in kernels and copies: {p['device_ms_per_step']:.2f} ms/step")
        for key, count, ms in p["host_calls"]:
            print(f"    {key:40s} x{count:<6d} {ms:7.3f} ms/step on the host")
    print("loader verdict:", stats.get("limiting_stage"), "-", stats.get("evidence"))


if __name__ == "__main__":
    main()
