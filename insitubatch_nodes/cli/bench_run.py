"""`insitubatch bench`: the default graph on the user's own store, for a fixed time.

Before training, a user wants to know how fast the loader reads *their* store from
*this* host, and what limits it, without writing a loop. `run_bench` builds the loader
as `build_loader` does by default, draws batches for `seconds` (epoch after epoch; the
consumer does nothing, so the loader is the only thing measured), and adds up what
`Loader.stats()` reports at the end of each epoch: samples, batches, chunks and bytes
read, reads in flight. Every `interval_s` it also takes one point of a time series
(throughput and reads in flight over the interval), for the PNG. The read latency
quantiles are those of the run's reads, from the fetch stage's latency histogram (the
counters `stats()` reads per epoch), and the limiting stage is the verdict of the
longest epoch.

Nothing here prints: `cli.bench_text` lays the result out and `cli.bench_plot` draws it. The
store is named as every message names it (credentials redacted).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm
from zarr.abc.store import Store

from insitubatch_nodes.builder.build_loader import build_loader
from insitubatch_nodes.core.settings import as_int
from insitubatch_nodes.io.joined_source import source_where
from insitubatch_nodes.io.reads.fetch_stats import FetchStats
from insitubatch_nodes.loader.loader import Loader
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.pin_to_device import resolve_device
from insitubatch_nodes.nodes.read_planner import ReadPlanNode

DEFAULT_SECONDS = 30.0
POINTS = 120  # points of the time series over a run, at most 4 a second

# `Loader.stats()` figures that add up over epochs
_SUMMED = ("batches", "samples", "chunks_read", "bytes_fetched", "bytes_decoded", "retries")


@dataclass(frozen=True)
class BenchPoint:
    """One interval of the run.

    Args:
        t_s: seconds since the first batch was asked for, at the interval's end.
        samples_per_s: samples handed out per second over the interval.
        reads_in_flight: chunk reads in flight over the interval, on average.
        inflight_target: the self-tuning in-flight target at the interval's end.
    """

    t_s: float
    samples_per_s: float
    reads_in_flight: float
    inflight_target: int


@dataclass(frozen=True)
class BenchResult:
    """What a bench run read, and how fast.

    Args:
        store: the store, as messages name it (credentials redacted).
        split: the split read.
        batch_size: samples per batch.
        device: where batches went.
        block_chunks: units per block the loader chose.
        decode_threads: threads of its decode pool.
        seconds: the run's length, from the first batch asked for to the last handed out.
        epochs: epochs begun (the last one possibly cut short by the time limit).
        batches: batches handed out.
        samples: samples in them.
        chunks_read: chunks read and decoded into blocks.
        bytes_fetched: stored bytes the reads through object-store gets returned (reads
            of local files are not counted here).
        bytes_decoded: decoded bytes written into blocks.
        retries: reads tried again.
        reads_in_flight_mean: chunk reads in flight on average over the run.
        reads_in_flight_max: the most at once.
        latency_p50_s: the median read latency, or None without reads through gets.
        latency_p95_s: the 95th percentile, or None.
        limiting_stage: the longest epoch's `limiting_stage`.
        evidence: its evidence.
        series: the run, interval by interval.
    """

    store: str
    split: str
    batch_size: int
    device: str
    block_chunks: int
    decode_threads: int
    seconds: float
    epochs: int
    batches: int
    samples: int
    chunks_read: int
    bytes_fetched: int
    bytes_decoded: int
    retries: int
    reads_in_flight_mean: float
    reads_in_flight_max: int
    latency_p50_s: float | None
    latency_p95_s: float | None
    limiting_stage: str
    evidence: str
    series: tuple[BenchPoint, ...]

    @property
    def samples_per_s(self) -> float:
        """Samples handed out per second over the run."""
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def decoded_mb_per_s(self) -> float:
        """Decoded megabytes (10**6 bytes) per second over the run."""
        return self.bytes_decoded / self.seconds / 1e6 if self.seconds > 0 else 0.0

    @property
    def fetched_mb_per_s(self) -> float:
        """Stored megabytes fetched through gets per second over the run."""
        return self.bytes_fetched / self.seconds / 1e6 if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        """The result as plain JSON data, the rates included."""
        data = asdict(self)
        data["series"] = [asdict(point) for point in self.series]
        data["samples_per_s"] = self.samples_per_s
        data["decoded_mb_per_s"] = self.decoded_mb_per_s
        data["fetched_mb_per_s"] = self.fetched_mb_per_s
        return data


class _Run:
    """The run so far: the finished epochs' sums, and the time series."""

    def __init__(self, interval_s: float) -> None:
        self.sums = dict.fromkeys(_SUMMED, 0)
        self.read_s = 0.0  # reads in flight, integrated over the finished epochs
        self.most_in_flight = 0
        self.epochs: list[tuple[float, str, str]] = []  # (wall, verdict, evidence)
        self.interval_s = interval_s
        self.points: list[BenchPoint] = []
        self._last = (0.0, 0, 0.0)  # (t, samples, read_s) at the last point

    def end_epoch(self, stats: dict[str, Any]) -> None:
        for key in _SUMMED:
            self.sums[key] += int(stats[key])
        self.read_s += float(stats["reads_in_flight_mean"]) * float(stats["wall_s"])
        self.most_in_flight = max(self.most_in_flight, int(stats["reads_in_flight_max"]))
        self.epochs.append((float(stats["wall_s"]), stats["limiting_stage"], stats["evidence"]))

    def point(self, t: float, stats: dict[str, Any]) -> BenchPoint:
        samples = self.sums["samples"] + int(stats["samples"])
        read_s = self.read_s + float(stats["reads_in_flight_mean"]) * float(stats["wall_s"])
        then, then_samples, then_read_s = self._last
        span = max(t - then, 1e-9)
        point = BenchPoint(
            t_s=t,
            samples_per_s=(samples - then_samples) / span,
            reads_in_flight=max(0.0, read_s - then_read_s) / span,
            inflight_target=int(stats["reads_in_flight_target"]),
        )
        self.points.append(point)
        self._last = (t, samples, read_s)
        return point


def _only(loader: Loader[Any], kind: type) -> Any:
    found = [n for n in graph_nodes(loader.root) if isinstance(n, kind)]
    if len(found) != 1:
        raise TypeError(f"the bench runs build_loader's graph, with one {kind.__name__}")
    return found[0]


def _latency(start: FetchStats, end: FetchStats, q: float) -> float | None:
    counts = [
        a - b for a, b in zip(end.read_latency_counts, start.read_latency_counts, strict=True)
    ]
    return end.latency_quantile(q, counts)


def run_bench(
    source: str | Path | Store | Sequence[str | Path | Store],
    variables: Sequence[str] | None = None,
    *,
    seconds: float = DEFAULT_SECONDS,
    split: str = "all",
    batch_size: int = 32,
    device: str | None = None,
    storage_options: dict[str, Any] | Sequence[dict[str, Any] | None] | None = None,
    progress: bool = True,
    join: str = "exact",
) -> BenchResult:
    """Draw batches from `build_loader`'s default graph for `seconds`, epoch after epoch,
    and say how fast they came and what limited them.

    Args:
        source: the Zarr group, as `build_loader` takes it (URL, path or open store), or
            a list of them, joined as `build_loader` joins them.
        variables: the arrays to load (default: the loader's).
        seconds: how long to draw batches (> 0); the run stops after the first batch
            handed out past it.
        split: the split to read (default the whole store).
        batch_size: samples per batch.
        device: where batches go (default `build_loader`'s: CUDA when there is one).
        storage_options: obstore client options, as `build_loader` takes them.
        progress: show a live progress bar on stderr (tqdm).
        join: how a list of stores is aligned on time, as `build_loader` takes it.
    """
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not seconds > 0:
        raise ValueError(f"seconds must be a number above 0, got {seconds!r}")
    batch_size = as_int("batch_size", batch_size, minimum=1)
    loader = build_loader(
        source,
        variables,
        split,
        batch_size=batch_size,
        device=device,
        storage_options=storage_options,
        join=join,
    )
    fetch: AsyncFetchNode = _only(loader, AsyncFetchNode)
    plans: ReadPlanNode = _only(loader, ReadPlanNode)
    where = source_where(source, storage_options)
    run = _Run(interval_s=max(0.25, seconds / POINTS))
    first = fetch.stats.snapshot()
    started = time.perf_counter()
    next_point = run.interval_s
    wall = 0.0  # until the last batch handed out, not the graph's shutdown after it
    with tqdm(
        total=round(seconds, 1),
        unit="s",
        desc="bench",
        disable=not progress,
        bar_format="{desc} {bar} {n:.1f}/{total:.1f} s{postfix}",
    ) as bar:
        while True:
            handed = 0
            timed_out = False
            for _ in loader:
                handed += 1
                elapsed = wall = time.perf_counter() - started  # the run ends at a batch
                if elapsed >= next_point or elapsed >= seconds:
                    point = run.point(elapsed, loader.stats())
                    next_point = elapsed + run.interval_s
                    bar.n = min(elapsed, bar.total)
                    bar.set_postfix_str(
                        f"{point.samples_per_s:,.0f} samples/s, "
                        f"{point.reads_in_flight:.0f} reads in flight",
                        refresh=True,
                    )
                if elapsed >= seconds:
                    timed_out = True
                    run.end_epoch(loader.stats())  # before leaving closes the graph
                    break
            if not timed_out:
                run.end_epoch(loader.stats())
            if handed == 0:
                raise ValueError(
                    f"split {split!r} of {where} yields no batch: pick a split with samples"
                )
            if timed_out:
                break
    last = fetch.stats.snapshot()
    longest = max(run.epochs, key=lambda epoch: epoch[0])
    return BenchResult(
        store=where,
        split=split,
        batch_size=batch_size,
        device=str(resolve_device(device)),
        block_chunks=plans.block_chunks,
        decode_threads=fetch.context.decode_threads,
        seconds=wall,
        epochs=len(run.epochs),
        batches=run.sums["batches"],
        samples=run.sums["samples"],
        chunks_read=run.sums["chunks_read"],
        bytes_fetched=run.sums["bytes_fetched"],
        bytes_decoded=run.sums["bytes_decoded"],
        retries=run.sums["retries"],
        reads_in_flight_mean=run.read_s / wall if wall > 0 else 0.0,
        reads_in_flight_max=run.most_in_flight,
        latency_p50_s=_latency(first, last, 0.5),
        latency_p95_s=_latency(first, last, 0.95),
        limiting_stage=longest[1],
        evidence=longest[2],
        series=tuple(run.points),
    )
