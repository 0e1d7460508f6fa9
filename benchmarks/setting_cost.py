"""What one setting costs against the loader without it, measured alike by every benchmark
that asks (`area`, `statics`, `forcings`): timed epochs of fresh loaders, interleaved over
repeats, the flags those benchmarks share and the cells of their tables.

Each repeat runs every configuration once, one after another, so that a change in a shared
machine's load falls on all of them alike. A run is one warm-up epoch (the page cache and
the first epoch's start-up are not the setting's cost), then the timed epochs. Beside
samples/s goes the process's CPU time per sample, every thread's: on a shared host it is
the steadier figure.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

Run = TypeVar("Run")


@dataclass(frozen=True)
class EpochRates:
    """What the timed epochs of one run measured.

    Args:
        samples_s: samples per second of wall time.
        cpu_us_per_sample: the process's CPU time (every thread) per sample, in µs.
        caller_cpu_us_per_sample: the CPU time per sample of the thread that iterates the
            loader (where its last nodes run: CF decoding, forcings on the CPU), in µs;
            the rest is the loader's threads' (fetch, decode).
    """

    samples_s: float
    cpu_us_per_sample: float
    caller_cpu_us_per_sample: float


def timed_epochs(loader: Iterable[Mapping[str, Any]], epochs: int) -> EpochRates:
    """One warm-up epoch of `loader`, then `epochs` timed ones.

    Args:
        loader: a loader whose batches hold `sample_index`; each pass over it is an epoch.
        epochs: the epochs timed after the warm-up.
    """
    for _ in loader:
        pass
    samples = 0
    start, cpu_start, caller_start = time.perf_counter(), time.process_time(), time.thread_time()
    for _ in range(epochs):
        for batch in loader:
            samples += len(batch["sample_index"])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    caller = time.thread_time() - caller_start
    return EpochRates(samples / seconds, 1e6 * cpu / samples, 1e6 * caller / samples)


def interleaved(runs: Mapping[str, Callable[[], Run]], repeats: int) -> dict[str, list[Run]]:
    """Every run `repeats` times, all of them once per repeat in turn; each label's results
    in repeat order.

    Args:
        runs: label -> one run of that configuration.
        repeats: how many times each runs.
    """
    results: dict[str, list[Run]] = {label: [] for label in runs}
    for _ in range(repeats):
        for label, run in runs.items():
            results[label].append(run())
    return results


def parser(
    doc: str, *, steps: int, steps_per_chunk: int, epochs: int, repeats: int
) -> argparse.ArgumentParser:
    """The flags these benchmarks share, at one benchmark's defaults; it adds its own.

    Args:
        doc: the benchmark's module docstring (its first line is the description).
        steps: the store's time steps by default.
        steps_per_chunk: the store's time steps per chunk by default.
        epochs: timed epochs per run by default.
        repeats: runs of each configuration by default.
    """
    flags = argparse.ArgumentParser(description=doc.splitlines()[0])
    flags.add_argument("--steps", type=int, default=steps, help="time steps of the store")
    flags.add_argument("--steps-per-chunk", type=int, default=steps_per_chunk)
    flags.add_argument("--epochs", type=int, default=epochs)
    flags.add_argument("--repeats", type=int, default=repeats)
    flags.add_argument("--folder", type=Path, default=None, help="where the stores go")
    return flags


def store_folder(folder: Path | None, prefix: str) -> Path:
    """`folder`, or a fresh temporary one (the stores are written once per folder).

    Args:
        folder: the folder asked for, or None.
        prefix: the temporary folder's name prefix.
    """
    return folder or Path(tempfile.mkdtemp(prefix=prefix))


def median_range(rates: Sequence[float]) -> str:
    """The cell `median (least .. most)`, whole numbers with thousands separators.

    Args:
        rates: one figure per repeat.
    """
    median = statistics.median(rates)
    return f"{median:,.0f} ({min(rates):,.0f} .. {max(rates):,.0f})"


def change(value: float, base: float) -> str:
    """The cell for `value` against `base`, a signed percentage (`+4.2%`).

    Args:
        value: the configuration's figure.
        base: the same figure without the setting.
    """
    return f"{100 * (value / base - 1):+.1f}%"
