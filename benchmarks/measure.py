"""The timed loop every loader goes through, numpy and the standard library only.

It is shared with the driver that runs `insitubatch` 0.2.0 in its own Python 3.12
environment (where neither torch nor this project is installed), so every loader pays the
same per-batch bookkeeping: per-sample checksums (float64 sums of each variable), taken
inside the timed loop, and checked against a direct zarr read afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

Batch = tuple[np.ndarray, Mapping[str, np.ndarray]]


@dataclass
class Drained:
    """What one loader yielded, in order, and how long it took."""

    order: np.ndarray  # sample indices, as yielded
    sums: np.ndarray  # (samples, variables) float64 checksums, as yielded
    seconds: float
    first_batch_s: float
    nbytes: int
    first_batch_samples: int  # the steady rate leaves the first batch (and its wait) out

    @property
    def steady_samples_per_s(self) -> float | None:
        """Samples per second after the first batch: what a long training run sees, with
        start-up (opening the store, the first reads) reported apart as `first_batch_s`."""
        after = self.order.size - self.first_batch_samples
        took = self.seconds - self.first_batch_s
        return after / took if after > 0 and took > 0 else None


def sample_sums(arrays: Mapping[str, np.ndarray], variables: Sequence[str]) -> np.ndarray:
    """Per-sample float64 sums of each variable: (samples, variables). Summed with a
    float64 accumulator, not through a float64 copy: the check is paid inside every loader's
    timed loop, and a copy twice the batch's size would cost as much as a fast loader."""
    count = len(arrays[variables[0]])
    return np.stack(
        [np.asarray(arrays[v]).reshape(count, -1).sum(1, dtype=np.float64) for v in variables],
        axis=1,
    )


def drain(
    batches: Iterable[Batch],
    variables: Sequence[str],
    max_samples: int,
    max_seconds: float = float("inf"),
) -> Drained:
    """Iterate until `max_samples` samples, the end, or `max_seconds` (slow loaders: their
    rate is steady long before), timing from before the first pull."""
    start = time.perf_counter()
    first = None
    first_samples = 0
    order: list[np.ndarray] = []
    sums: list[np.ndarray] = []
    nbytes = seen = 0
    for index, arrays in batches:
        if first is None:
            first = time.perf_counter() - start
            first_samples = len(index)
        sums.append(sample_sums(arrays, variables))
        order.append(np.asarray(index, dtype=np.int64))
        nbytes += sum(np.asarray(arrays[v]).nbytes for v in variables)
        seen += len(index)
        if seen >= max_samples or time.perf_counter() - start > max_seconds:
            break
    seconds = time.perf_counter() - start
    if not order:
        raise RuntimeError("the loader yielded no batch")
    return Drained(
        np.concatenate(order), np.concatenate(sums), seconds, first or 0.0, nbytes, first_samples
    )


def checks_out(drained: Drained, truth: np.ndarray) -> bool:
    """Every yielded sample matches a direct read, and no sample came twice."""
    order = drained.order
    in_range = order.size and order.min() >= 0 and order.max() < len(truth)
    return bool(
        in_range
        and np.unique(order).size == order.size
        and np.array_equal(drained.sums, truth[order])
    )


def peak_rss_mb() -> float:
    """This process's high-water RSS (VmHWM; ru_maxrss would carry a parent's over exec).
    Worker processes are not included."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")
