"""FetchStats: running totals of what the fetch stage read, decoded and retried.

Counters are updated from the event loop and the decode threads and read from anywhere
(tests, benchmarks, the demo). Each update names its counters as keyword arguments, so a
misspelt counter is a TypeError at the call (and a type checker's error before it), and
one lock acquisition covers every counter a read step touches.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


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
        host_decoded_chunks: chunks of GPU-decoded arrays that the host decoded instead,
            because nvCOMP could not be given them checked (several zstd frames, no
            declared size, a content checksum in the frame).
        decode_cpu_ns: CPU time the decode threads spent decoding the library's chunks
            (their sinks: checks, decode, copies into blocks), in nanoseconds.
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
    host_decoded_chunks: int = 0
    decode_cpu_ns: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

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
        host_decoded_chunks: int = 0,
        decode_cpu_ns: int = 0,
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
            host_decoded_chunks: see the class.
            decode_cpu_ns: see the class.
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
            self.host_decoded_chunks += host_decoded_chunks
            self.decode_cpu_ns += decode_cpu_ns

    def count_retry(self) -> None:
        """One more retry: the `on_retry` callback of `RetryPolicy.call`."""
        self.add(retries=1)
