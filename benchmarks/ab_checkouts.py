"""Two checkouts of the library against each other, runs interleaved: the check that a
change costs no throughput (defaults, batch 32, ERA5-shaped stores at 1, 4 and 24 steps
per chunk, local and behind 30 ms per read).

    git worktree add /tmp/before <commit>
    python -m benchmarks.ab_checkouts /tmp/before . --repeats 5
    python -m benchmarks.ab_checkouts /tmp/before . --repeats 9 --only 4/zstd/30

Each run is a fresh process: one warm epoch, then the median samples/s of five epochs.
The two checkouts alternate run by run, so drift of the machine falls on both; the table
gives the median and the range of each, and their ratio (after / before). On a 2-core VM
runs vary by +-20%: read ratios whose ranges overlap as no difference.
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
sys.path.insert(0, sys.argv[1])
from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES
latency_s = float(sys.argv[3])
source = sys.argv[2]
if latency_s:
    from benchmarks.latency_store import open_latency_store
    source = open_latency_store(source, latency_s)
loader = build_loader(source, list(ERA5_VARIABLES), split="all", batch_size=32, device="cpu")
for batch in loader:
    pass
rates = []
for _ in range(5):
    started, samples = time.perf_counter(), 0
    for batch in loader:
        samples += len(batch["sample_index"])
    rates.append(samples / (time.perf_counter() - started))
print(statistics.median(rates))
"""

# (time steps, steps per chunk, codec, ms per read)
SCENARIOS = (
    (480, 1, "zstd", 0),
    (480, 1, "blosc-lz4", 0),
    (960, 4, "zstd", 0),
    (960, 4, "blosc-lz4", 0),
    (1920, 24, "zstd", 0),
    (1920, 24, "blosc-lz4", 0),
    (480, 1, "zstd", 30),
    (960, 4, "zstd", 30),
)


def _rate(checkout: Path, store: Path, latency_ms: int) -> float:
    done = subprocess.run(
        [sys.executable, "-c", EPOCHS, str(checkout.resolve()), str(store), str(latency_ms / 1000)],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",  # so that neither checkout is imported from the working directory
    )
    return float(done.stdout.split()[-1])


def main(argv: list[str] | None = None) -> None:
    """Print the interleaved comparison table.

    Args:
        argv: command-line arguments (default: `sys.argv[1:]`).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="checkout measured first in each pair")
    parser.add_argument("after", type=Path, help="checkout measured second in each pair")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/insitubatch-ab")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="STEPS/CODEC/MS",
        help="run only these scenarios, e.g. 4/zstd/30 (steps per chunk, codec, ms per read)",
    )
    args = parser.parse_args(argv)
    wanted = SCENARIOS
    if args.only:
        wanted = tuple(s for s in SCENARIOS if f"{s[1]}/{s[2]}/{s[3]}" in args.only)
        if not wanted:
            parser.error(f"--only {args.only} names no scenario")
    print("| store | ms/read | runs | before samples/s (range) | after samples/s (range) | ratio |")
    print("|---|---:|---:|---:|---:|---:|")
    for steps, per_chunk, codec, latency_ms in wanted:
        store = ensure_store(args.cache, steps, per_chunk, codec)
        rates: dict[str, list[float]] = {"before": [], "after": []}
        for _ in range(args.repeats):
            rates["before"].append(_rate(args.before, store, latency_ms))
            rates["after"].append(_rate(args.after, store, latency_ms))
        before, after = rates["before"], rates["after"]
        print(
            f"| {store.name} | {latency_ms} | {args.repeats} | {statistics.median(before):.0f} "
            f"({min(before):.0f}-{max(before):.0f}) | {statistics.median(after):.0f} "
            f"({min(after):.0f}-{max(after):.0f}) | "
            f"{statistics.median(after) / statistics.median(before):.2f} |"
        )


if __name__ == "__main__":
    main()
