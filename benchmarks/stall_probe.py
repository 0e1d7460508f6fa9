"""Where does a fed training step lose its time? One process, one store, one model.

    python -m benchmarks.stall_probe            # needs CUDA

`benchmarks.gpu` measures the data stall (`1 - compute-only time / fed time`); this says
what it is made of. After a warm-up epoch it times, per step:

- compute: the step on one fixed batch (no loader);
- fed: the step on the loader's batches (defaults, CPU decode);
- loader busy, fixed batch: the loader iterated as in `fed`, the step on the fixed batch
  (the loader's activity without its data);
- fed with two cores left to the training thread and the loop (decode threads = cores - 2),
  fed with the decode threads at a lower scheduling priority (nice 10: they take only the
  cores the training thread leaves), and fed with a 0.5 ms GIL switch interval;

and, for each, the host time the training thread spends inside the step (its kernel
launches, no synchronisation): when that exceeds the GPU's time per step, the training
thread itself is what the GPU waits for.

then profiles 20 steps of `compute` and of `fed` with torch.profiler: device time per
step in kernels and copies (is the GPU slower, or idle?) and the training thread's host
calls that take longest (which wait it makes).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
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


class NicedDecodeThreads:
    """While active, gives every decode thread of the library a higher nice value (Linux
    sets it per thread), checking every 20 ms: the fetch loop starts its pool anew each
    epoch, so the threads come and go."""

    def __init__(self, niceness: int) -> None:
        self.niceness = niceness
        self.changed: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            for thread in threading.enumerate():
                tid = thread.native_id
                if "-decode" in thread.name and tid is not None and tid not in self.changed:
                    with contextlib.suppress(ProcessLookupError):
                        os.setpriority(os.PRIO_PROCESS, tid, self.niceness)
                    self.changed.add(tid)

    def __enter__(self) -> NicedDecodeThreads:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


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

    rows: dict[str, tuple[float, float]] = {}
    rows["compute"] = _timed(args.steps, repeat_fixed(), step)
    rows["fed"] = _timed(args.steps, _forever(default), step)
    rows["loader busy, fixed batch"] = _timed(args.steps, busy_fixed(default), step)
    rows["compute again"] = _timed(args.steps, repeat_fixed(), step)
    cores = len(os.sched_getaffinity(0))
    spared = loader(decode_threads=max(1, cores - 2))
    for batch in spared:  # its own warm-up epoch
        step(batch)
    rows[f"fed, {max(1, cores - 2)} decode threads"] = _timed(args.steps, _forever(spared), step)
    spared.close()
    with NicedDecodeThreads(10) as niced_threads:
        niced = loader()
        for batch in niced:
            step(batch)
        timed = _timed(args.steps, _forever(niced), step)
        niced.close()
    rows[f"fed, decode threads at nice 10 ({len(niced_threads.changed)})"] = timed
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
    base = rows["compute"][0]
    print(
        f"width {args.width}, shuffle {args.shuffle}, {args.steps} steps each; "
        "stall = 1 - compute / this"
    )
    for name, (ms, host_ms) in rows.items():
        print(
            f"{name:40s} {ms:7.2f} ms/step  stall {max(0.0, 1 - base / ms):6.1%}  "
            f"host in step {host_ms:6.2f} ms"
        )
    for name, p in profiles.items():
        print(f"[{name}] device time in kernels and copies: {p['device_ms_per_step']:.2f} ms/step")
        for key, count, ms in p["host_calls"]:
            print(f"    {key:40s} x{count:<6d} {ms:7.3f} ms/step on the host")
    print("loader verdict:", stats.get("limiting_stage"), "-", stats.get("evidence"))


if __name__ == "__main__":
    main()
