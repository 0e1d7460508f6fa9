"""Samples per second of `build_loader` with `shuffle="block"` against `shuffle="pool"`
(issue 17), on a local ERA5-shaped store (4 x float32 (121, 240), batch 32, CPU), the pool
at each of `--pool-ramps` (by default the default ramp, and 0, the pool filled to P before
an epoch's first batch, version 1's order).

The orders run interleaved (each round rotates which goes first), each a fresh loader
running `--epochs` epochs, so that load from other processes on a shared machine falls on
all alike. A loader's first epoch is reported apart from the later ones (a fresh loader's
first epoch page-faults the pool's memory in), and so is the time to each epoch's first
batch (without a ramp the pool reads its P units, up to its 1 GiB window, before it).
Both wall-clock samples/s and samples per CPU second of the process (all threads) are
printed; the medians close the run. `--step-ms` sleeps that long after each batch, as a
training step on a GPU leaves the CPU to the loader: without a step the loader has nothing
to overlap its reads with but its own gathers, so the pool's ramp shows there mainly in
the time to the first batch; with one, in whole epochs.

    python -m benchmarks.shuffle_throughput                      # 4,320 steps, 24 per chunk
    python -m benchmarks.shuffle_throughput --rounds 6 --epochs 3
    python -m benchmarks.shuffle_throughput --read-across-epochs
    python -m benchmarks.shuffle_throughput --time-steps 1920 --pool-ramps 1 2 0
    python -m benchmarks.shuffle_throughput --time-steps 1920 --pool-ramps 2 0 --step-ms 20
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from insitubatch_nodes import SAMPLE_INDEX_KEY, build_loader
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES, write_era5_like
from insitubatch_nodes.core.pool_order import POOL_RAMP


def epoch_rates(
    store: Path, order: str, epochs: int, read_across_epochs: bool, step_s: float = 0.0
) -> list[tuple[float, float, float]]:
    """(wall samples/s, samples per CPU second, seconds to the first batch) of each epoch
    of one fresh loader.

    Args:
        store: the store's directory.
        order: `"block"`, or `"pool r=R"` for the pool shuffle with `pool_ramp=R`.
        epochs: epochs to run.
        read_across_epochs: keep the fetch node (and its block memory) between epochs.
        step_s: seconds slept after each batch (a training step that leaves the CPU).
    """
    shuffle, _, ramp = order.partition(" r=")
    loader = build_loader(
        str(store),
        list(ERA5_VARIABLES),
        split="all",
        batch_size=32,
        device="cpu",
        seed=0,
        shuffle=shuffle,
        read_across_epochs=read_across_epochs,
        **({"pool_ramp": int(ramp)} if ramp else {}),
    )
    rates = []
    for _ in range(epochs):
        wall, cpu, samples, first = time.perf_counter(), time.process_time(), 0, 0.0
        for batch in loader:
            if not samples:
                first = time.perf_counter() - wall
            samples += len(batch[SAMPLE_INDEX_KEY])
            if step_s:
                time.sleep(step_s)
        rates.append(
            (samples / (time.perf_counter() - wall), samples / (time.process_time() - cpu), first)
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
    parser.add_argument("--pool-ramps", type=int, nargs="+", default=[POOL_RAMP, 0])
    parser.add_argument("--step-ms", type=float, default=0.0, help="a training step per batch")
    args = parser.parse_args()
    orders = ["block", *(f"pool r={ramp}" for ramp in args.pool_ramps)]
    store = Path(args.store)
    if not store.exists():
        write_era5_like(store, time_steps=args.time_steps, steps_per_chunk=args.steps_per_chunk)
    first: dict[str, list[float]] = {o: [] for o in orders}
    later: dict[str, list[float]] = {o: [] for o in orders}
    later_cpu: dict[str, list[float]] = {o: [] for o in orders}
    first_batch: dict[str, list[float]] = {o: [] for o in orders}
    later_first_batch: dict[str, list[float]] = {o: [] for o in orders}
    for round_ in range(args.rounds):
        shift = round_ % len(orders)
        for order in orders[shift:] + orders[:shift]:
            rates = epoch_rates(
                store, order, args.epochs, args.read_across_epochs, args.step_ms / 1000
            )
            first[order].append(rates[0][0])
            first_batch[order].append(rates[0][2])
            later[order] += [wall for wall, _, _ in rates[1:]]
            later_cpu[order] += [cpu for _, cpu, _ in rates[1:]]
            later_first_batch[order] += [s for _, _, s in rates[1:]]
            shown = " ".join(f"{wall:.0f}" for wall, _, _ in rates)
            shown_cpu = " ".join(f"{cpu:.0f}" for _, cpu, _ in rates)
            shown_first = " ".join(f"{s:.2f}" for _, _, s in rates)
            print(
                f"round {round_} {order:9s} samples/s {shown} | per CPU second {shown_cpu} "
                f"| first batch s {shown_first}"
            )
    for order in orders:
        print(
            f"{order:9s} median samples/s: first epoch {statistics.median(first[order]):.0f}, "
            f"later epochs {statistics.median(later[order]):.0f} "
            f"({statistics.median(later_cpu[order]):.0f} per CPU second); first batch "
            f"{statistics.median(first_batch[order]):.2f} s, in later epochs "
            f"{statistics.median(later_first_batch[order] or [0.0]):.2f} s"
        )


if __name__ == "__main__":
    main()
