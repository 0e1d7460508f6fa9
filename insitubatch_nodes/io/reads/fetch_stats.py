"""FetchStats: running totals of what the fetch stage read, decoded and retried.

Counters are updated from the event loop and the decode threads and read from anywhere
(tests, benchmarks, the demo). Each update names its counters as keyword arguments, so a
misspelt counter is a TypeError at the call (and a type checker's error before it), and
one lock acquisition covers every counter a read step touches.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass, field

LATENCY_BUCKETS_PER_OCTAVE = 4  # read latencies are counted in quarter octaves of 1 us
LATENCY_BUCKETS = 32 * LATENCY_BUCKETS_PER_OCTAVE  # up to about an hour


def latency_bucket(seconds: float) -> int:
    """The histogram bucket of a read that took `seconds`.

    Args:
        seconds: the read's round trip.
    """
    micros = max(1.0, seconds * 1e6)
    return min(LATENCY_BUCKETS - 1, int(LATENCY_BUCKETS_PER_OCTAVE * math.log2(micros)))


def bucket_seconds(bucket: int) -> float:
    """The middle (geometric) of a latency bucket, in seconds.

    Args:
        bucket: a bucket index.
    """
    return 2 ** ((bucket + 0.5) / LATENCY_BUCKETS_PER_OCTAVE) / 1e6


@dataclass
class FetchStats:
    """Totals since the fetch node was built (they are not reset between epochs).

    Args:
        chunks_read: chunks decoded into blocks, on any path.
        bytes_decoded: decoded bytes written into blocks.
        blocks_fetched: blocks handed to the shuffle.
        fast_path_chunks: chunks the library decoded itself (not zarr).
        local_file_reads: chunk files read with plain file reads.
        shard_index_reads: shard indexes read (each once while cached).
        range_requests: ranged requests for inner chunks of shards.
        retries: reads tried again after a transient error.
        device_decode_calls: GPU decode calls (fewer than blocks when grouped).
        device_decode_ns: wall time of those calls (staging, copy to the device, decode,
            the wait for the stream), in nanoseconds: with `bytes_decoded`, the rate GPU
            decode reaches inside the loader, to hold against nvCOMP's own at the same
            call size.
        host_decoded_chunks: chunks of GPU-decoded arrays that the host decoded instead,
            because nvCOMP could not be given them checked (several zstd frames, no
            declared size, a content checksum in the frame).
        decode_cpu_ns: CPU time the decode threads spent decoding the library's chunks
            (their sinks: checks, decode, copies into blocks), in nanoseconds.
        gets: reads that held a read slot and completed (gets, ranged gets, zarr reads).
        bytes_fetched: bytes those reads returned.
        read_ns: their round trips, summed (over a span of time, that sum is the mean
            number of reads in flight times the span).
        slot_wait_ns: time reads waited for a slot, summed (the in-flight limit binding).
        most_in_flight: the most reads in flight at once.
        cache_hits: chunks served from the local chunk cache (no store read).
        cache_misses: chunks looked up in the cache and read from the store instead.
        cache_bytes_served: stored bytes the cache served: store traffic saved.
        cache_bytes_written: bytes of entries admitted to the cache.
        read_latency_counts: reads per latency bucket (`latency_bucket`).
        loop_busy_ns: time the fetch event loop spent working (callbacks, the GIL) rather
            than waiting for IO (`io.reads.event_loop.EventLoopThread`'s `on_busy`).
    """

    chunks_read: int = 0
    bytes_decoded: int = 0
    blocks_fetched: int = 0
    fast_path_chunks: int = 0
    local_file_reads: int = 0
    shard_index_reads: int = 0
    range_requests: int = 0
    retries: int = 0
    device_decode_calls: int = 0
    device_decode_ns: int = 0
    host_decoded_chunks: int = 0
    decode_cpu_ns: int = 0
    gets: int = 0
    bytes_fetched: int = 0
    read_ns: int = 0
    slot_wait_ns: int = 0
    most_in_flight: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    cache_bytes_served: int = 0
    cache_bytes_written: int = 0
    read_latency_counts: list[int] = field(default_factory=lambda: [0] * LATENCY_BUCKETS)
    loop_busy_ns: int = 0
    _lock: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )

    def add(
        self,
        *,
        chunks_read: int = 0,
        bytes_decoded: int = 0,
        blocks_fetched: int = 0,
        fast_path_chunks: int = 0,
        local_file_reads: int = 0,
        shard_index_reads: int = 0,
        range_requests: int = 0,
        retries: int = 0,
        device_decode_calls: int = 0,
        device_decode_ns: int = 0,
        host_decoded_chunks: int = 0,
        decode_cpu_ns: int = 0,
        cache_hits: int = 0,
        cache_misses: int = 0,
        cache_bytes_served: int = 0,
        cache_bytes_written: int = 0,
        loop_busy_ns: int = 0,
    ) -> None:
        """Add to the named counters, atomically.

        Args:
            chunks_read: see the class.
            bytes_decoded: see the class.
            blocks_fetched: see the class.
            fast_path_chunks: see the class.
            local_file_reads: see the class.
            shard_index_reads: see the class.
            range_requests: see the class.
            retries: see the class.
            device_decode_calls: see the class.
            device_decode_ns: see the class.
            host_decoded_chunks: see the class.
            decode_cpu_ns: see the class.
            cache_hits: see the class.
            cache_misses: see the class.
            cache_bytes_served: see the class.
            cache_bytes_written: see the class.
            loop_busy_ns: see the class.
        """
        with self._lock:
            self.chunks_read += chunks_read
            self.bytes_decoded += bytes_decoded
            self.blocks_fetched += blocks_fetched
            self.fast_path_chunks += fast_path_chunks
            self.local_file_reads += local_file_reads
            self.shard_index_reads += shard_index_reads
            self.range_requests += range_requests
            self.retries += retries
            self.device_decode_calls += device_decode_calls
            self.device_decode_ns += device_decode_ns
            self.host_decoded_chunks += host_decoded_chunks
            self.decode_cpu_ns += decode_cpu_ns
            self.cache_hits += cache_hits
            self.cache_misses += cache_misses
            self.cache_bytes_served += cache_bytes_served
            self.cache_bytes_written += cache_bytes_written
            self.loop_busy_ns += loop_busy_ns

    def add_read(self, waited_s: float, rtt_s: float, nbytes: int, in_flight: int) -> None:
        """One read through a read slot completed.

        Args:
            waited_s: how long it waited for its slot.
            rtt_s: its round trip once it held the slot.
            nbytes: bytes it returned.
            in_flight: reads in flight when it was sent, itself included.
        """
        bucket = latency_bucket(rtt_s)
        with self._lock:
            self.gets += 1
            self.bytes_fetched += nbytes
            self.read_ns += int(rtt_s * 1e9)
            self.slot_wait_ns += int(waited_s * 1e9)
            self.most_in_flight = max(self.most_in_flight, in_flight)
            self.read_latency_counts[bucket] += 1

    def latency_quantile(self, q: float, counts: list[int] | None = None) -> float | None:
        """The `q` quantile of read latency in seconds (within a quarter octave), or None
        before any read.

        Args:
            q: the quantile, in [0, 1].
            counts: a histogram to read instead of the totals (e.g. one epoch's: the
                difference of two snapshots' `read_latency_counts`).
        """
        counts = list(self.read_latency_counts) if counts is None else counts
        total = sum(counts)
        if not total:
            return None
        rank = q * (total - 1)
        seen = 0
        for bucket, count in enumerate(counts):
            seen += count
            if seen > rank:
                return bucket_seconds(bucket)
        return bucket_seconds(len(counts) - 1)

    def snapshot(self) -> FetchStats:
        """A copy of the counters as they are now (to count an epoch from)."""
        with self._lock:
            copy = dataclasses.replace(self)
            copy.read_latency_counts = list(self.read_latency_counts)
        return copy

    def count_loop_busy(self, busy_ns: int) -> None:
        """The fetch loop worked `busy_ns` more nanoseconds: its `on_busy` callback.

        Args:
            busy_ns: nanoseconds of one loop iteration's work.
        """
        with self._lock:
            self.loop_busy_ns += busy_ns

    def count_retry(self) -> None:
        """One more retry: the `on_retry` callback of `RetryPolicy.call`."""
        self.add(retries=1)
