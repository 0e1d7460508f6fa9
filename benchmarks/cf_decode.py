"""What CF decoding costs (issue 32): a packed int16 store (ERA5's encoding: `scale_factor`,
`add_offset`, `_FillValue`) read with decoding on (the default) against `decode_cf=False`,
and against the same values stored as float32, at 1 and 24 steps per chunk, local and
behind a fixed read latency (`benchmarks.latency_store`).

    PYTHONPATH=. python -m benchmarks.cf_decode --repeats 5
    PYTHONPATH=. python -m benchmarks.cf_decode --latency-ms 0 --steps-per-chunk 1 24
    git archive <commit> insitubatch_nodes | tar -x -C /tmp/before
    PYTHONPATH=. python -m benchmarks.cf_decode --latency-ms 0 --library /tmp/before .

Each repeat runs every configuration once, one after another (interleaved, so a change in
the machine's load falls on all of them alike), one warm-up epoch then --epochs timed
epochs of a fresh loader, on the CPU. With --library, each repeat runs in a fresh process
per library checkout (its `insitubatch_nodes` imported from there), the checkouts taking
turns. A configuration's decoding share of an epoch is computed within each repeat,
against that repeat's `decode_cf=False` run: (on - off) / on, of the wall time and of the
process's CPU time (every thread) per sample, the steadier figure on a shared host; the
median and the range over repeats are reported. "The decoding's own CPU" is the steadiest:
the decoding alone (its floor below) over the loader's CPU per sample, both of one repeat.
The target: <= 10% of an epoch at one step per chunk and <= 5% at 24. The same
decoding over the consuming thread's own CPU per sample (the gather, the decoding and the
loader's bookkeeping, when `device_prefetch` does not move them: the serial path) says
how much of the thread that waits for batches it takes.

Beside the loaders, the floors of a batch's decoding on this host, in CPU time of the
thread per sample (a batch of 32 samples, fresh output arrays as the loader makes them,
the 8 MiB of other traffic between batches that a loader's reads and gathers make): the
decoding alone (`core.decoded_values.decode_values`; 1% of the values masked, as in the
stores, and none, as in most ERA5 fields), each numpy pass of the float64 decoding alone
over a warm batch ("pass: ..."), and writing the output's bytes once
(`np.empty(...).fill`, and a copy between warm float64 buffers); --floors-only times only
these (with --library, each checkout's decoding against the other's).

--step-ms sleeps that long after each batch, a training step that leaves the CPU to the
loader's threads; with --device-prefetch 1 the gather and the decoding run on the device
node's producer thread during it. Memory is the block memory the loader held at most
(`loader.stats()`), and the bytes of one sample as stored and as batches hold it.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.latency_store import open_latency_store

GRID = (64, 128)
BATCH = 32
PACKING = {"dtype": "int16", "scale_factor": 0.002, "add_offset": 273.15, "_FillValue": -32767}
OFF = "int16, decode_cf=False"
CONFIGS = (  # (label, store, build_loader settings)
    ("int16, decode on", "int16", {}),
    (OFF, "int16", {"decode_cf": False}),
    ("int16, decode on, dtype=float32", "int16", {"dtype": "float32"}),
    ("float32 store", "float32", {}),
)
# a loader's configuration -> the floor that times its decoding alone (`_floors`)
KERNELS = {
    "int16, decode on": "decode, float64",
    "int16, decode on, dtype=float32": "decode, dtype=float32",
}
OTHER_TRAFFIC_BYTES = 8 << 20  # what a loader's reads and gathers move between batches


def _values(steps: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    lat = np.linspace(-1.0, 1.0, GRID[0])[:, None]
    field = 273.15 + 30.0 * np.cos(np.pi * lat / 2) + rng.normal(0.0, 2.0, (steps, *GRID))
    field[rng.random(field.shape) < 0.01] = np.nan  # 1% missing: the fill value is stored
    return field


def write_stores(folder: Path, steps: int, steps_per_chunk: int) -> dict[str, str]:
    """The same values stored packed as int16 and as float32 (xarray's `to_zarr`, v3)."""
    import xarray as xr

    values = _values(steps)
    times = np.datetime64("2000-01-01T00", "ns") + np.arange(steps) * np.timedelta64(1, "h")
    ds = xr.Dataset({"t2m": (("time", "lat", "lon"), values)}, coords={"time": times})
    chunks = (steps_per_chunk, *GRID)
    paths = {}
    for name, encoding in (("int16", PACKING), ("float32", {"dtype": "float32"})):
        path = folder / f"{name}-{steps_per_chunk}.zarr"
        if not path.exists():
            ds.to_zarr(
                str(path),
                zarr_format=3,
                encoding={"t2m": {**encoding, "chunks": chunks}},
                consolidated=False,
            )
        paths[name] = str(path)
    return paths


def _run(path: str, args: argparse.Namespace, latency_ms: float, **settings: Any) -> dict:
    from insitubatch_nodes import build_loader

    store = open_latency_store(path, latency_ms / 1000)
    loader = build_loader(
        store,
        ["t2m"],
        "all",
        batch_size=BATCH,
        device="cpu",
        seed=0,
        device_prefetch=args.device_prefetch,
        **settings,
    )
    for _ in loader:  # warm-up: the first epoch's start-up is not decoding's
        pass
    samples, held = 0, 0
    start, cpu_start = time.perf_counter(), time.process_time()
    thread_start = time.thread_time()  # the consuming thread's: the serial path
    for _ in range(args.epochs):
        for batch in loader:
            samples += len(batch["sample_index"])
            held = max(held, loader.stats()["memory_held_bytes"])
            if args.step_ms:
                time.sleep(args.step_ms / 1000)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    thread_cpu = time.thread_time() - thread_start
    sample = batch["t2m"][0]
    loader.close()
    return {
        "wall_us_per_sample": 1e6 * seconds / samples,
        "cpu_us_per_sample": 1e6 * cpu / samples,
        "thread_cpu_us_per_sample": 1e6 * thread_cpu / samples,
        "memory_held_bytes": held,
        "sample_bytes": sample.numel() * sample.element_size(),
    }


def _floors(repeats: int = 7, batches: int = 40) -> dict[str, float]:
    """Thread CPU µs per sample of one batch's decoding (1% of its values masked, or
    none), of each of the float64 kernel's passes over a warm batch alone, and of writing
    its output once."""
    from insitubatch_nodes.core.cf_decoding import cf_decoding
    from insitubatch_nodes.core.decoded_values import decode_values

    rng = np.random.default_rng(0)
    shape = (BATCH, *GRID)
    unmasked = [rng.integers(-32000, 32000, size=shape, dtype=np.int16) for _ in range(8)]
    stored = [batch.copy() for batch in unmasked]
    for batch in stored:
        batch.flat[::100] = PACKING["_FillValue"]
    decoding = cf_decoding(
        "int16",
        fill_values=[PACKING["_FillValue"]],
        scale_factor=PACKING["scale_factor"],
        add_offset=PACKING["add_offset"],
    )
    warm = np.ones(shape, np.float64)
    hits = np.zeros(shape, bool)
    hits.flat[::100] = True
    other = np.ones(OTHER_TRAFFIC_BYTES, np.uint8)
    steps: dict[str, Callable[[int], Any]] = {
        "decode, float64": lambda i: decode_values(stored[i], decoding),
        "decode, float64, no value masked": lambda i: decode_values(unmasked[i], decoding),
        "decode, dtype=float32": lambda i: decode_values(stored[i], decoding, "float32"),
        "decode, dtype=float16": lambda i: decode_values(stored[i], decoding, "float16"),
        "pass: widen int16 into float64": lambda i: np.copyto(warm, stored[i], casting="unsafe"),
        "pass: multiply": lambda i: np.multiply(warm, PACKING["scale_factor"], out=warm),
        "pass: add": lambda i: np.add(warm, PACKING["add_offset"], out=warm),
        "pass: compare the int16": lambda i: np.equal(stored[i], -32767, out=hits),
        "pass: NaN where masked": lambda i: np.copyto(warm, np.nan, where=hits),
        "np.empty(...).fill, float64": lambda i: np.empty(shape, np.float64).fill(1.0),
        "np.empty(...).fill, float32": lambda i: np.empty(shape, np.float32).fill(1.0),
        "copy of a float64 batch": lambda i: warm.copy(),
    }
    per_sample: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(repeats):
        for name, step in steps.items():
            kept: collections.deque[Any] = collections.deque(maxlen=3)  # batches in use
            cpu = 0.0
            for i in range(batches):
                other += 1
                started = time.thread_time()
                kept.append(step(i % len(stored)))
                cpu += time.thread_time() - started
            per_sample[name].append(1e6 * cpu / (batches * BATCH))
    return {name: statistics.median(values) for name, values in per_sample.items()}


def _repeat(args: argparse.Namespace, paths: dict[str, str], latency: float) -> dict:
    """One repeat: every configuration once (unless --floors-only), then the floors."""
    runs = {}
    if not args.floors_only:
        runs = {label: _run(paths[store], args, latency, **kw) for label, store, kw in CONFIGS}
    return {"runs": runs, "floors": _floors()}


def _child_repeat(args: argparse.Namespace, library: str, steps_per_chunk: int, latency: float):
    command = [
        sys.executable,
        "-m",
        "benchmarks.cf_decode",
        "--child",
        library,
        "--folder",
        str(args.folder),
        "--steps",
        str(args.steps),
        "--steps-per-chunk",
        str(steps_per_chunk),
        "--latency-ms",
        str(latency),
        "--epochs",
        str(args.epochs),
        "--step-ms",
        str(args.step_ms),
    ]
    if args.device_prefetch is not None:
        command += ["--device-prefetch", str(args.device_prefetch)]
    if args.floors_only:
        command.append("--floors-only")
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _spread(values: list[float], scale: float = 1.0, fmt: str = "{:.1f}") -> str:
    scaled = [scale * v for v in values]
    low, mid, high = min(scaled), statistics.median(scaled), max(scaled)
    return f"{fmt.format(mid)} ({fmt.format(low)} .. {fmt.format(high)})"


def _report(library: str, steps_per_chunk: int, latency: float, repeats: list[dict]) -> list:
    rows = []
    for label, _, _ in CONFIGS if repeats[0]["runs"] else ():
        runs = [r["runs"][label] for r in repeats]
        offs = [r["runs"][OFF] for r in repeats]
        pairs = list(zip(runs, offs, strict=True))
        wall_share = [1 - o["wall_us_per_sample"] / r["wall_us_per_sample"] for r, o in pairs]
        cpu_share = [1 - o["cpu_us_per_sample"] / r["cpu_us_per_sample"] for r, o in pairs]
        row = {
            "library": library,
            "steps_per_chunk": steps_per_chunk,
            "latency_ms": latency,
            "loader": label,
            "wall_us_per_sample": [r["wall_us_per_sample"] for r in runs],
            "cpu_us_per_sample": [r["cpu_us_per_sample"] for r in runs],
            "wall_share": wall_share,
            "cpu_share": cpu_share,
            "memory_held_bytes": max(r["memory_held_bytes"] for r in runs),
            "sample_bytes": runs[0]["sample_bytes"],
        }
        rows.append(row)
        print(
            f"| {library} | {steps_per_chunk} | {latency:g} ms | {label} "
            f"| {_spread(row['wall_us_per_sample'])} | {_spread(wall_share, 100, '{:+.1f}%')} "
            f"| {_spread(row['cpu_us_per_sample'])} | {_spread(cpu_share, 100, '{:+.1f}%')} "
            f"| {row['memory_held_bytes'] / 2**20:.1f} MiB | {row['sample_bytes']:,} |",
            flush=True,
        )
    floors = {name: [r["floors"][name] for r in repeats] for name in repeats[0]["floors"]}
    for name, values in floors.items():
        print(f"| {library} | {steps_per_chunk} | floor | {name} | | | {_spread(values)} | | | |")
    for label, floor in KERNELS.items() if repeats[0]["runs"] else ():  # over the loader's
        own = [r["floors"][floor] / r["runs"][label]["cpu_us_per_sample"] for r in repeats]
        serial = [
            r["floors"][floor] / r["runs"][label]["thread_cpu_us_per_sample"] for r in repeats
        ]
        rows.append(
            {
                "library": library,
                "steps_per_chunk": steps_per_chunk,
                "loader": label,
                "latency_ms": latency,
                "kernel_cpu_share": own,
                "kernel_thread_share": serial,
            }
        )
        print(
            f"| {library} | {steps_per_chunk} | {latency:g} ms | {label}: the decoding's own "
            f"CPU | | | | {_spread(own, 100, '{:.1f}%')} | | |"
        )
        print(
            f"| {library} | {steps_per_chunk} | {latency:g} ms | {label}: the decoding's share "
            f"of the consuming thread's CPU | | | | {_spread(serial, 100, '{:.1f}%')} | | |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=960, help="time steps of each store")
    parser.add_argument("--steps-per-chunk", type=int, nargs="+", default=[1, 24])
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0, 30.0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--step-ms", type=float, default=0.0, help="a training step's sleep")
    parser.add_argument("--device-prefetch", type=int, default=None)
    parser.add_argument(
        "--library",
        nargs="+",
        default=None,
        help="checkouts whose insitubatch_nodes to compare, taking turns (each repeat a "
        "fresh process); default: the one imported here, in this process",
    )
    parser.add_argument("--floors-only", action="store_true", help="no loaders, the floors")
    parser.add_argument("--folder", type=Path, default=None, help="where the stores go")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.folder = args.folder or Path(tempfile.mkdtemp(prefix="cf-decode-"))
    if args.child is not None:  # one repeat, for --library: its results as JSON
        sys.path.insert(0, str(Path(args.child).resolve()))
        paths = write_stores(args.folder, args.steps, args.steps_per_chunk[0])
        print(json.dumps(_repeat(args, paths, args.latency_ms[0])))
        return
    print(f"load average: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(
        "| library | steps/chunk | latency | loader | wall µs/sample (median, range) "
        "| decoding's share of the wall time | CPU µs/sample | decoding's share of the CPU "
        "| block memory held | bytes/sample |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    results: list[dict[str, Any]] = []
    for steps_per_chunk in args.steps_per_chunk:
        paths = write_stores(args.folder, args.steps, steps_per_chunk)
        for latency in args.latency_ms:
            repeats: dict[str, list[dict]] = collections.defaultdict(list)
            for _ in range(args.repeats):
                for library in args.library or ["."]:
                    if args.library is None:
                        repeats[library].append(_repeat(args, paths, latency))
                    else:
                        repeats[library].append(
                            _child_repeat(args, library, steps_per_chunk, latency)
                        )
            for library, done in repeats.items():
                results += _report(library, steps_per_chunk, latency, done)
            if len(repeats) == 2:  # the second checkout's floors against the first's
                (first, before), (second, after) = repeats.items()
                for name in before[0]["floors"]:
                    ratios = [
                        a["floors"][name] / b["floors"][name]
                        for a, b in zip(after, before, strict=True)
                    ]
                    print(
                        f"| {second} against {first} | {steps_per_chunk} | floor | {name} "
                        f"| | | x{_spread(ratios, fmt='{:.2f}')} | | | |"
                    )
    print(f"load average: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
