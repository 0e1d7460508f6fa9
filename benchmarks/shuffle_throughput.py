"""Samples per second of `build_loader` with `shuffle="block"` against `shuffle="pool"`
(issue 17), on a local ERA5-shaped store (4 x float32 (121, 240), batch 32, CPU).

The orders run interleaved (block, pool, then pool, block, ...), each round a fresh
loader running `--epochs` epochs, so that load from other processes on a shared machine
falls on both alike. A loader's first epoch is reported apart from the later ones: the
pool reads P units (its 1 GiB window) before its first batch, and a fresh loader's first
epoch page-faults that memory in, so the first epoch is where the orders differ most.
Both wall-clock samples/s and samples per CPU second of the process (all threads) are
printed; the medians close the run.

    python -m benchmarks.shuffle_throughput                      # 4,320 steps, 24 per chunk
    python -m benchmarks.shuffle_throughput --rounds 6 --epochs 3
    python -m benchmarks.shuffle_throughput --read-across-epochs
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from insitubatch_nodes import SAMPLE_INDEX_KEY, build_loader
from insitubatch_nodes.synthetic import ERA5_VARIABLES, write_era5_like

ORDERS = ("block", "pool")


def epoch_rates(
    store: Path, shuffle: str, epochs: int, read_across_epochs: bool
) -> list[tuple[float, float]]:
    """(wall samples/s, samples per CPU second) of each epoch of one fresh loader.

    Args:
        store: the store's directory.
        shuffle: `"block"` or `"pool"`.
        epochs: epochs to run.
        read_across_epochs: keep the fetch node (and its block memory) between epochs.
    """
    loader = build_loader(
        str(store),
        list(ERA5_VARIABLES),
        split="all",
        batch_size=32,
        device="cpu",
        seed=0,
        shuffle=shuffle,
        read_across_epochs=read_across_epochs,
    )
    rates = []
    for _ in range(epochs):
        wall, cpu, samples = time.perf_counter(), time.process_time(), 0
        for batch in loader:
            samples += len(batch[SAMPLE_INDEX_KEY])
        rates.append(
            (samples / (time.perf_counter() - wall), samples / (time.process_time() - cpu))
        )
    loader.close()
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="/tmp/insitubatch-shuffle-throughput.zarr")
    parser.add_argument("--time-steps", type=int, default=4320)
    parser.add_argument("--steps-per-chunk", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument(
        "--read-across-epochs",
        action="store_true",
        help="keep block memory between epochs (no pool pages faulted in afresh)",
    )
    args = parser.parse_args()
    store = Path(args.store)
    if not store.exists():
        write_era5_like(store, time_steps=args.time_steps, steps_per_chunk=args.steps_per_chunk)
    first: dict[str, list[float]] = {o: [] for o in ORDERS}
    later: dict[str, list[float]] = {o: [] for o in ORDERS}
    later_cpu: dict[str, list[float]] = {o: [] for o in ORDERS}
    for round_ in range(args.rounds):
        for order in ORDERS if round_ % 2 == 0 else ORDERS[::-1]:
            rates = epoch_rates(store, order, args.epochs, args.read_across_epochs)
            first[order].append(rates[0][0])
            later[order] += [wall for wall, _ in rates[1:]]
            later_cpu[order] += [cpu for _, cpu in rates[1:]]
            shown = " ".join(f"{wall:.0f}" for wall, _ in rates)
            shown_cpu = " ".join(f"{cpu:.0f}" for _, cpu in rates)
            print(f"round {round_} {order:5s} samples/s {shown} | per CPU second {shown_cpu}")
    for order in ORDERS:
        print(
            f"{order:5s} median samples/s: first epoch {statistics.median(first[order]):.0f}, "
            f"later epochs {statistics.median(later[order]):.0f} "
            f"({statistics.median(later_cpu[order]):.0f} per CPU second)"
        )


if __name__ == "__main__":
    main()
