"""Where a fresh process's first epoch spends its time, against its later epochs.

One process builds the default loader on a benchmark store (optionally behind the delaying
wrapper, `latency_store.py`) and runs a few epochs. Per batch it records when the batch
came, how long the consumer waited for it, and the counters `loader.stats()` exposes
(reads done, decode CPU, the in-flight target, block memory held); the store wrapper
records when each get started and finished, which gives the reads in flight over time
(behind a delay only: `--delay-ms 0` opens the store as users open a local one, and its
reads are then not recorded).
The summary puts each epoch side by side in fixed time bins: reads finished, the most
and mean reads in flight, decode CPU, batches out and the consumer's wait, and the
process's page faults and CPU time over the epoch (from `getrusage`).

    python -m benchmarks.first_epoch --steps-per-chunk 24 --delay-ms 30
    python -m benchmarks.first_epoch --steps-per-chunk 24 --delay-ms 0 --epochs 2
    python -m benchmarks.first_epoch --json out.json   # every batch and get, for plots
    python -m benchmarks.first_epoch --compare /tmp/before --repeats 8

`--compare` runs this checkout's library and another's (a copy of an earlier commit, e.g.
`git archive <commit> | tar -x -C /tmp/before`), each run a fresh process, alternating,
and gives per checkout the median and range of the first epoch (from `build_loader` on,
as `benchmarks.defaults` times it), of the second, of their ratio in each process, and
of the CPU the epochs took (the process's user and system time, the decode threads'),
with the ratios after / before. On a busy machine the rates vary widely; the ratio within
a process and the CPU times much less.

Relative figures are the point (first against second epoch in one process): on a shared
machine absolute rates vary from run to run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

from benchmarks.latency_store import open_latency_store
from benchmarks.stores import ensure_store
from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES

STEPS = {1: 480, 4: 960, 24: 1920}


class TimedStore(WrapperStore[Store]):
    """Records (start, end) of every get on a `time.perf_counter` clock."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.gets: list[tuple[float, float]] = []

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        started = time.perf_counter()
        try:
            return await self._store.get(key, prototype, byte_range)
        finally:
            self.gets.append((started, time.perf_counter()))


def _usage() -> tuple[float, float, int]:
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime, used.ru_stime, used.ru_minflt


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Every epoch's batches and gets, and the build's time."""
    path = ensure_store(args.cache, STEPS[args.steps_per_chunk], args.steps_per_chunk, "zstd")
    store = TimedStore(open_latency_store(str(path), args.delay_ms / 1000))
    settings = json.loads(args.settings)
    built = time.perf_counter()
    loader = build_loader(
        store if args.delay_ms else str(path),  # a local store as users open one
        list(ERA5_VARIABLES),
        split="all",
        batch_size=args.batch_size,
        device="cpu",
        **settings,
    )
    build_s = time.perf_counter() - built
    metadata_gets = len(store.gets)
    epochs = []
    for _ in range(args.epochs):
        first_get = len(store.gets)
        user0, system0, faults0 = _usage()
        start = time.perf_counter()
        batches = []
        iterator = iter(loader)
        while True:
            asked = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                break
            came = time.perf_counter()
            stats = loader.stats()
            batches.append(
                {
                    "t": came - start,
                    "wait_s": came - asked,
                    "samples": len(batch["sample_index"]),
                    "chunks_read": stats.get("chunks_read", 0),
                    "decode_cpu_s": stats.get("decode_cpu_s", 0.0),
                    "inflight_target": stats.get("reads_in_flight_target", 0),
                    "memory_held_MB": stats.get("memory_held_bytes", 0) / 1e6,
                }
            )
        end = time.perf_counter()
        user1, system1, faults1 = _usage()
        gets = [(s - start, e - start) for s, e in store.gets[first_get:]]
        epochs.append(
            {
                "seconds": end - start,
                "user_s": user1 - user0,
                "system_s": system1 - system0,
                "minor_faults": faults1 - faults0,
                "batches": batches,
                "gets": gets,
                "limiting_stage": loader.stats().get("limiting_stage"),
            }
        )
    return {"build_s": build_s, "metadata_gets": metadata_gets, "epochs": epochs}


def _bins(epoch: dict[str, Any], width: float) -> list[dict[str, float]]:
    """The epoch in bins of `width` seconds."""
    count = int(epoch["seconds"] / width) + 1
    rows = [
        {"done": 0, "max_fly": 0, "fly_s": 0.0, "decode_s": 0.0, "batches": 0, "wait_s": 0.0}
        for _ in range(count)
    ]
    for started, ended in epoch["gets"]:
        last = min(count - 1, int(ended / width))
        rows[last]["done"] += 1
        for b in range(max(0, int(started / width)), last + 1):
            lo, hi = max(started, b * width), min(ended, (b + 1) * width)
            rows[b]["fly_s"] += max(0.0, hi - lo)
    events = sorted([(s, 1) for s, _ in epoch["gets"]] + [(e, -1) for _, e in epoch["gets"]])
    flying = 0
    for at, step in events:
        flying += step
        b = min(count - 1, max(0, int(at / width)))
        rows[b]["max_fly"] = max(rows[b]["max_fly"], flying)
    decoded = 0.0
    for batch in epoch["batches"]:
        b = min(count - 1, int(batch["t"] / width))
        rows[b]["batches"] += 1
        rows[b]["wait_s"] += batch["wait_s"]
        rows[b]["decode_s"] += batch["decode_cpu_s"] - decoded
        decoded = batch["decode_cpu_s"]
    return rows


def summary(result: dict[str, Any], width: float) -> str:
    """The epochs side by side, as text."""
    lines = [f"build_loader {result['build_s']:.3f} s, {result['metadata_gets']} gets"]
    for number, epoch in enumerate(result["epochs"]):
        batches = epoch["batches"]
        waited = sum(b["wait_s"] for b in batches)
        lines.append(
            f"epoch {number}: {epoch['seconds']:.3f} s, {len(epoch['gets'])} gets, "
            f"first batch {batches[0]['t']:.3f} s, consumer waited {waited:.3f} s, "
            f"process CPU user {epoch['user_s']:.2f} s system {epoch['system_s']:.2f} s, "
            f"minor faults {epoch['minor_faults']}, "
            f"decode CPU {batches[-1]['decode_cpu_s']:.2f} s, "
            f"target at the end {batches[-1]['inflight_target']}, "
            f"verdict {epoch['limiting_stage']}"
        )
        lines.append(
            "   bin s | gets done | most in flight | mean in flight | decode CPU s "
            "| batches | consumer wait s"
        )
        for b, row in enumerate(_bins(epoch, width)):
            lines.append(
                f"  {b * width:6.2f} | {row['done']:9d} | {row['max_fly']:14d} "
                f"| {row['fly_s'] / width:14.1f} | {row['decode_s']:12.3f} "
                f"| {row['batches']:7d} | {row['wait_s']:.3f}"
            )
    return "\n".join(lines)


def compare(args: argparse.Namespace, before: Path) -> str:
    """This checkout against `before`, runs alternating (see the module)."""
    here = Path(__file__).resolve().parent.parent
    passed = [
        f"--steps-per-chunk={args.steps_per_chunk}",
        f"--delay-ms={args.delay_ms}",
        f"--batch-size={args.batch_size}",
        f"--epochs={max(2, args.epochs)}",
        f"--settings={args.settings}",
        f"--cache={args.cache}",
    ]
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "run.json"
        for _ in range(args.repeats):
            for name, checkout in (("before", before), ("after", here)):
                env = {**os.environ, "PYTHONPATH": str(checkout)}
                command = [sys.executable, __file__, *passed, "--quiet", f"--json={out}"]
                subprocess.run(command, env=env, check=True, capture_output=True)
                runs[name].append(json.loads(out.read_text()))

    def figures(run: dict[str, Any]) -> dict[str, float]:
        first, second = run["epochs"][0], run["epochs"][1]
        return {
            "first epoch s": run["build_s"] + first["seconds"],
            "second epoch s": second["seconds"],
            "first / second": (run["build_s"] + first["seconds"]) / second["seconds"],
            "first epoch's decode CPU s": first["batches"][-1]["decode_cpu_s"],
            "first epoch's system CPU s": first["system_s"],
            "first epoch's CPU s": first["system_s"] + first["user_s"],
            "second epoch's CPU s": second["system_s"] + second["user_s"],
        }

    table = {name: [figures(run) for run in done] for name, done in runs.items()}
    lines = [f"{args.repeats} runs each, alternating; median (range)"]
    for key in table["after"][0]:
        values = {name: [f[key] for f in rows] for name, rows in table.items()}
        medians = {name: statistics.median(v) for name, v in values.items()}
        lines.append(
            f"{key}: before {medians['before']:.3f} "
            f"({min(values['before']):.3f}-{max(values['before']):.3f}), after "
            f"{medians['after']:.3f} ({min(values['after']):.3f}-{max(values['after']):.3f}), "
            f"after / before {medians['after'] / medians['before']:.2f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run and print the summary.

    Args:
        argv: command-line arguments (default: `sys.argv[1:]`).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps-per-chunk", type=int, default=24, choices=sorted(STEPS))
    parser.add_argument("--delay-ms", type=float, default=30.0)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--bin-s", type=float, default=0.1)
    parser.add_argument("--settings", default="{}", help="build_loader settings as JSON")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/insitubatch-ab")
    parser.add_argument("--json", type=Path, default=None, help="also write every record")
    parser.add_argument("--quiet", action="store_true", help="one line per epoch only")
    parser.add_argument("--compare", type=Path, default=None, help="another checkout")
    parser.add_argument("--repeats", type=int, default=6, help="runs per checkout")
    args = parser.parse_args(argv)
    if args.compare is not None:
        print(compare(args, args.compare.resolve()))
        return
    result = run(args)
    text = summary(result, args.bin_s)
    if args.quiet:
        text = "\n".join(line for line in text.splitlines() if not line.startswith(" "))
    print(text)
    if args.json:
        args.json.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
