"""The self-tuning in-flight reads against every fixed setting, store by store.

A default that adapts must do about as well as the best number a user could have found
by hand for that store. For each scenario (steps per chunk, delay per read, optionally
a bandwidth cap) this runs the default loader and `max_inflight` fixed at 16 ... 1024,
each run a fresh process, the settings interleaved within each repeat so that drift of
the machine falls on all of them. The best fixed setting is picked on the odd repeats
and scored on the even ones (picking and scoring on the same runs would favour the
sweep by its own noise); the table gives each median with its range and the ratio of
the default to that best.

    python -m benchmarks.inflight_sweep --repeats 4
    python -m benchmarks.inflight_sweep --repeats 4 --only 1/30 24/30/200
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks.stores import ensure_store

EPOCHS = """
import statistics, sys, time
from benchmarks.latency_store import open_latency_store
from insitubatch_nodes import build_loader
from insitubatch_nodes.synthetic import ERA5_VARIABLES
path, latency_s, bandwidth, setting = sys.argv[1:5]
store = open_latency_store(path, float(latency_s), bandwidth_bytes_s=float(bandwidth) or None)
cap = None if setting == "auto" else int(setting)
loader = build_loader(store, list(ERA5_VARIABLES), split="all", batch_size=32, device="cpu",
                      max_inflight=cap)
for batch in loader:
    pass
rates = []
for _ in range(3):
    started, samples = time.perf_counter(), 0
    for batch in loader:
        samples += len(batch["sample_index"])
    rates.append(samples / (time.perf_counter() - started))
print(statistics.median(rates))
"""

# (steps per chunk, ms per read, MB/s of the link or 0 for none)
SCENARIOS = ((1, 30, 0), (24, 30, 0), (1, 100, 0), (24, 100, 0), (24, 30, 200))
FIXED = ("16", "64", "256", "1024")
STEPS = {1: 480, 24: 1920}


def _rate(store: Path, latency_ms: int, mb_s: int, setting: str) -> float | None:
    """Samples/s of one run, or None when the loader refused the setting (a fixed count
    whose reads in flight do not fit the default memory budget)."""
    argv = [str(store), str(latency_ms / 1000), str(mb_s * 1e6), setting]
    done = subprocess.run([sys.executable, "-c", EPOCHS, *argv], capture_output=True, text=True)
    if done.returncode:
        if "memory_budget" not in done.stderr:
            raise RuntimeError(f"max_inflight={setting} failed:\n{done.stderr}")
        return None
    return float(done.stdout.split()[-1])


def _label(scenario: tuple[int, int, int]) -> str:
    per_chunk, latency_ms, mb_s = scenario
    return f"{per_chunk}/{latency_ms}" + (f"/{mb_s}" if mb_s else "")


def main(argv: list[str] | None = None) -> None:
    """Print the sweep table.

    Args:
        argv: command-line arguments (default: `sys.argv[1:]`).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=4, help="an even number, 2 or more")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/insitubatch-ab")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="STEPS/MS[/MBPS]",
        help="run only these scenarios, e.g. 1/30 24/30/200",
    )
    args = parser.parse_args(argv)
    if args.repeats < 2 or args.repeats % 2:
        parser.error("--repeats must be even: half pick the best fixed setting, half score it")
    wanted = [s for s in SCENARIOS if not args.only or _label(s) in args.only]
    if not wanted:
        parser.error(f"--only {args.only} names no scenario")
    print(
        "| steps/chunk | ms/read | MB/s cap | default samples/s (range) | best fixed "
        "(picked on odd runs) | its samples/s (range) | default / best |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for scenario in wanted:
        per_chunk, latency_ms, mb_s = scenario
        store = ensure_store(args.cache, STEPS[per_chunk], per_chunk, "zstd")
        runs: dict[str, list[float]] = {s: [] for s in ("auto", *FIXED)}
        refused: set[str] = set()
        for _ in range(args.repeats):
            for setting in runs:
                if setting not in refused:
                    rate = _rate(store, latency_ms, mb_s, setting)
                    if rate is None:
                        refused.add(setting)
                    else:
                        runs[setting].append(rate)
        fits = [s for s in FIXED if s not in refused]
        best = max(fits, key=lambda s: statistics.median(runs[s][0::2]))
        auto, fixed = runs["auto"][1::2], runs[best][1::2]
        print(
            f"| {per_chunk} | {latency_ms} | {mb_s or '-'} | {statistics.median(auto):.0f} "
            f"({min(auto):.0f}-{max(auto):.0f}) | {best} | {statistics.median(fixed):.0f} "
            f"({min(fixed):.0f}-{max(fixed):.0f}) | "
            f"{statistics.median(auto) / statistics.median(fixed):.2f} |",
            flush=True,
        )
        if refused:
            print(f"|  | | | | refused by the default budget: {', '.join(sorted(refused))} | | |")


if __name__ == "__main__":
    main()
