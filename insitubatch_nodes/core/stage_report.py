"""What an epoch's counters say, and which stage limits the loader.

When a run is slow, the user needs the stage to blame, not twenty counters. The stages
are tried from the consumer inward: if the consumer seldom waits for a batch, the model
is the limit and nothing in the loader would help; otherwise the stage that is busiest
for its share of the wall time is named, with the figures that show it.

Reads that take much longer than the least round trip queue somewhere, and more of them
in flight would not deliver more (the in-flight target stops at twice the delivered rate
times that round trip, so a flat rate shows as round trips about twice the least). Where
they queue decides the remedy: on the link ("bandwidth", the store's own serving rate
included: nothing in this process would help) or in this process ("cpu": the fetch loop,
which runs every read's Python work, busy most of the time; fewer and larger reads, or
more free cores, would help). The fetch loop's busy time tells the two apart: behind a
link it mostly waits. Reads that do not queue are limited by the store's latency, with
the in-flight target (or a user's cap) saying how many may be under way. Pure: the
counters come in as numbers (`loader.Loader.stats` gathers them), so every verdict is
tested on made-up epochs (`tests/core/test_stage_report.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

STALL_OK = 0.05  # a consumer waiting for data less than this share of the time is the limit
BUSY = 0.75  # a stage busy this share of the time (or its threads') is saturated
QUEUED = 2.0  # round trips this many times the least one mean reads queue
LOOP_BUSY = 0.5  # a fetch loop working this share of the time is where reads queue


@dataclass(frozen=True)
class EpochActivity:
    """What one epoch did so far, as counted by the stages (a stage a graph lacks counts
    nothing).

    Args:
        wall_s: time since the epoch's first batch was asked for.
        waited_s: time the consumer spent waiting for batches.
        batches: batches handed out.
        samples: samples in them.
        sample_bytes: bytes of one sample of every variable.
        chunks_read: chunks decoded into blocks.
        bytes_fetched: stored bytes the reads returned.
        bytes_decoded: decoded bytes written into blocks.
        gets: reads that held a read slot.
        read_s: their round trips, summed.
        slot_wait_s: time reads waited for a slot, summed.
        most_in_flight: the most reads in flight at once.
        inflight_limit: the in-flight target now.
        min_rtt_s: the least round trip the target knows, or None.
        latency_s: read latency quantiles (p50, p90, p99), or None before any read.
        least_latency_s: the epoch's least read latency (its histogram bucket), or None
            before any read: the unqueued round trip before the target has measured one.
        loop_busy_s: time the fetch event loop spent working rather than waiting for IO.
        retries: reads tried again.
        decode_cpu_s: the decode threads' CPU time decoding.
        decode_threads: threads of the decode pool.
        gather_s: time the gather spent writing batches.
        memory_held_bytes: block memory held now.
        memory_allowed_bytes: block memory allowed (the budget's share for the shuffle
            window and the read-ahead).
        cache_hits: chunks served from the local chunk cache.
        cache_misses: chunks the cache was asked for and did not hold.
        cache_bytes_served: stored bytes the cache served (store traffic saved).
        cache_bytes_written: bytes of entries written to the cache.
        chunk_bytes_decoded: bytes of the chunks the delivered blocks read, whole.
        chunk_bytes_kept: bytes of the rows those reads kept (less than whole where units
            are finer than chunks: `core.unit_grid`).
    """

    wall_s: float = 0.0
    waited_s: float = 0.0
    batches: int = 0
    samples: int = 0
    sample_bytes: int = 0
    chunks_read: int = 0
    bytes_fetched: int = 0
    bytes_decoded: int = 0
    gets: int = 0
    read_s: float = 0.0
    slot_wait_s: float = 0.0
    most_in_flight: int = 0
    inflight_limit: int = 0
    min_rtt_s: float | None = None
    latency_s: tuple[float, float, float] | None = None
    least_latency_s: float | None = None
    loop_busy_s: float = 0.0
    retries: int = 0
    decode_cpu_s: float = 0.0
    decode_threads: int = 0
    gather_s: float = 0.0
    memory_held_bytes: int = 0
    memory_allowed_bytes: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cache_bytes_served: int = 0
    cache_bytes_written: int = 0
    chunk_bytes_decoded: int = 0
    chunk_bytes_kept: int = 0


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def limiting_stage(activity: EpochActivity) -> tuple[str, str]:
    """The stage that limits the loader, and the figures that show it.

    One of "consumer", "decode", "gather", "cpu" (reads queue in this process),
    "bandwidth" (reads queue on the link), "store latency", or "unknown" before a batch
    has been handed out.

    Args:
        activity: the epoch so far.
    """
    a = activity
    if a.batches == 0 or a.wall_s <= 0:
        return "unknown", "no batch handed out yet"
    stall = _share(a.waited_s, a.wall_s)
    if stall < STALL_OK:
        return "consumer", (
            f"the consumer waited for data {stall:.0%} of the time: the training step, "
            f"not the loader, sets the pace"
        )
    decode_busy = _share(a.decode_cpu_s, a.wall_s * max(1, a.decode_threads))
    if decode_busy >= BUSY:
        return "decode", (
            f"the {a.decode_threads} decode threads were busy {decode_busy:.0%} of the time "
            f"(consumer waiting {stall:.0%})"
        )
    gather_busy = _share(a.gather_s, a.wall_s)
    if gather_busy >= BUSY:
        return "gather", f"the gather ran {gather_busy:.0%} of the time"
    in_flight = _share(a.read_s, a.wall_s)
    loop_busy = _share(a.loop_busy_s, a.wall_s)
    unqueued = min((t for t in (a.min_rtt_s, a.least_latency_s) if t), default=None)
    if a.latency_s is not None and unqueued and a.latency_s[0] >= QUEUED * unqueued:
        queued = (
            f"reads took {a.latency_s[0] * 1e3:.0f} ms (median) against "
            f"{unqueued * 1e3:.0f} ms unqueued, {in_flight:.0f} in flight on average "
            f"(target {a.inflight_limit})"
        )
        if loop_busy >= LOOP_BUSY:
            return "cpu", (
                f"{queued}, and the fetch loop was busy {loop_busy:.0%} of the time: they "
                f"queue in this process for the Python work of each read (or for cores "
                f"other work holds), not on the link; fewer, larger reads (more steps per "
                f"chunk) or free cores would help"
            )
        return "bandwidth", (
            f"{queued}, delivering {_share(a.bytes_fetched, a.wall_s) / 1e6:.0f} MB/s "
            f"while the fetch loop was busy only {loop_busy:.0%} of the time: they queue "
            f"on the link (or in the store), and more in flight would not deliver more"
        )
    if a.gets:
        bound = (
            f", and waited for a slot {_share(a.slot_wait_s, a.read_s):.0%} as long as they "
            f"ran (the in-flight limit, {a.inflight_limit}, binds)"
            if a.slot_wait_s > 0.1 * a.read_s
            else ""
        )
        median = "" if a.latency_s is None else f" of {a.latency_s[0] * 1e3:.0f} ms"
        if median and unqueued:
            median += f" (unqueued {unqueued * 1e3:.0f} ms: they do not queue)"
        return "store latency", (
            f"{in_flight:.0f} reads in flight on average{median}{bound}; consumer waiting "
            f"{stall:.0%}, decode busy {decode_busy:.0%}"
        )
    return "decode", f"decode busy {decode_busy:.0%}, no remote reads; consumer waiting {stall:.0%}"


def epoch_stats(activity: EpochActivity) -> dict[str, float | int | str]:
    """The epoch's figures as a plain dict (what `Loader.stats()` returns), the limiting
    stage and its evidence included.

    Args:
        activity: the epoch so far.
    """
    a = activity
    stage, evidence = limiting_stage(a)
    delivered = a.samples * a.sample_bytes
    stats: dict[str, float | int | str] = {
        "wall_s": a.wall_s,
        "batches": a.batches,
        "samples": a.samples,
        "samples_per_s": _share(a.samples, a.wall_s),
        "data_stall_fraction": _share(a.waited_s, a.wall_s),
        "chunks_read": a.chunks_read,
        "bytes_fetched": a.bytes_fetched,
        "bytes_decoded": a.bytes_decoded,
        "read_mb_per_s": _share(a.bytes_fetched, a.wall_s) / 1e6,
        "reads_in_flight_mean": _share(a.read_s, a.wall_s),
        "reads_in_flight_max": a.most_in_flight,
        "reads_in_flight_target": a.inflight_limit,
        "fetch_loop_busy_fraction": _share(a.loop_busy_s, a.wall_s),
        "retries": a.retries,
        "decode_cpu_s": a.decode_cpu_s,
        "gather_s": a.gather_s,
        "read_amplification": _share(a.bytes_decoded, delivered),
        "chunk_amplification": _share(a.chunk_bytes_decoded, a.chunk_bytes_kept),
        "memory_held_bytes": a.memory_held_bytes,
        "memory_allowed_bytes": a.memory_allowed_bytes,
        "limiting_stage": stage,
        "evidence": evidence,
    }
    if a.cache_hits or a.cache_misses:  # a loader with a chunk cache
        stats["cache_hit_ratio"] = _share(a.cache_hits, a.cache_hits + a.cache_misses)
        stats["cache_hits"] = a.cache_hits
        stats["cache_bytes_served"] = a.cache_bytes_served
        stats["cache_bytes_written"] = a.cache_bytes_written
    if a.latency_s is not None:
        for name, value in zip(("p50", "p90", "p99"), a.latency_s, strict=True):
            stats[f"read_latency_{name}_s"] = value
    return stats
