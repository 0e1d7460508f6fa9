"""One timed epoch of one reader, and the table of many: CPU per chunk over every thread,
apart by where it ran (the decode pool, other Python threads, native threads), wall time,
decoded MB/s, and each figure against the decode floor of the same repeat.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.floor_readers import DECODE_POOLS
from benchmarks.thread_cpu import PythonThreadsCPU


@dataclass
class Sample:
    """What one epoch of one reader cost.

    Args:
        reader: the row's name.
        repeat: which interleaved round it ran in.
        chunks: chunks decoded.
        nbytes: decoded bytes.
        cpu_s: process CPU seconds, every thread's (native ones too).
        wall_s: seconds from the first read to the last decode.
        threads: CPU seconds of each Python thread, by name.
        counters: the loader's own figures for the epoch (`Loader.stats()`), else empty.
    """

    reader: str
    repeat: int
    chunks: int
    nbytes: int
    cpu_s: float
    wall_s: float
    threads: dict[str, float]
    counters: dict[str, Any] = field(default_factory=dict)

    @property
    def decode_pool_s(self) -> float:
        """CPU seconds of the threads that decode (`floor_readers.DECODE_POOLS`)."""
        return sum(s for name, s in self.threads.items() if name.startswith(DECODE_POOLS))

    @property
    def serial_s(self) -> float:
        """CPU seconds of Python threads outside the decode pool: the loop, the main thread
        (the consumer, the gather), zarr's loop."""
        return sum(self.threads.values()) - self.decode_pool_s

    @property
    def native_s(self) -> float:
        """CPU seconds of threads Python does not know (a native reader's or store client's),
        never below 0 (the clocks are read a moment apart)."""
        return max(0.0, self.cpu_s - sum(self.threads.values()))

    def per_chunk_us(self, seconds: float) -> float:
        """`seconds` spread over this epoch's chunks, in microseconds.

        Args:
            seconds: CPU seconds (one of this sample's parts).
        """
        return seconds / self.chunks * 1e6

    @property
    def mb_per_s(self) -> float:
        """Decoded megabytes a second."""
        return self.nbytes / self.wall_s / 1e6

    def as_json(self) -> dict[str, Any]:
        """The sample and its derived figures, for the results file."""
        return {
            **asdict(self),
            "cpu_us_per_chunk": self.per_chunk_us(self.cpu_s),
            "decode_pool_us_per_chunk": self.per_chunk_us(self.decode_pool_s),
            "serial_us_per_chunk": self.per_chunk_us(self.serial_s),
            "native_us_per_chunk": self.per_chunk_us(self.native_s),
            "mb_per_s": self.mb_per_s,
        }


def measure(
    reader: str,
    repeat: int,
    read: Callable[[], int],
    chunk_nbytes: int,
    threads: PythonThreadsCPU,
) -> Sample:
    """Time one epoch of `read` after a full garbage collection.

    Args:
        reader: the row's name.
        repeat: the interleaved round.
        read: reads one epoch, returning the chunks decoded.
        chunk_nbytes: bytes of one decoded chunk.
        threads: the per-thread CPU clock, entered before any reader started a thread.
    """
    gc.collect()
    threads.start()
    cpu, wall = time.process_time(), time.perf_counter()
    chunks = read()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return Sample(reader, repeat, chunks, chunks * chunk_nbytes, cpu, wall, threads.by_thread())


def spread(values: Sequence[float], digits: int = 0) -> str:
    """`median [least-most]`, the way benchmarks/README.md reports repeats.

    Args:
        values: one figure per repeat.
        digits: decimals shown.
    """
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:.{digits}f} [{low:.{digits}f}-{high:.{digits}f}]"


def table(samples: Sequence[Sample], floor: str) -> str:
    """A markdown table, one row per reader in order of first appearance, each figure the
    median over repeats with its range; the "x floor" and "over floor" columns compare each
    repeat with the floor's epoch of the same repeat.

    Args:
        samples: every epoch of every reader of one scenario.
        floor: the floor's row name.
    """
    floors = {s.repeat: s for s in samples if s.reader == floor}
    names = list(dict.fromkeys(s.reader for s in samples))
    lines = [
        "| reader | CPU us/chunk | over floor us | decode pool us | other Python us "
        "| native us | wall s | decoded MB/s | x floor MB/s |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name in names:
        rows = [s for s in samples if s.reader == name]
        paired = [(s, floors[s.repeat]) for s in rows if s.repeat in floors]
        over = [s.per_chunk_us(s.cpu_s) - f.per_chunk_us(f.cpu_s) for s, f in paired]
        ratio = [s.mb_per_s / f.mb_per_s for s, f in paired]
        cells = [
            spread([s.per_chunk_us(s.cpu_s) for s in rows]),
            spread(over) if over else "",
            spread([s.per_chunk_us(s.decode_pool_s) for s in rows]),
            spread([s.per_chunk_us(s.serial_s) for s in rows]),
            spread([s.per_chunk_us(s.native_s) for s in rows]),
            spread([s.wall_s for s in rows], 2),
            spread([s.mb_per_s for s in rows]),
            spread(ratio, 2) if ratio else "",
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
