"""`insitubatch bench`'s table: a `BenchResult` laid out for a terminal.

Plain text, one figure per line with what it counts beside it, so that it reads the same
piped into a file or pasted into an issue. Rates are over the whole run; megabytes are
10**6 bytes, as throughput usually is.
"""

from __future__ import annotations

from insitubatch_nodes.cli.bench_run import BenchResult


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f} ms"


def format_bench(result: BenchResult) -> str:
    """The result as a table: samples/s, MB/s, reads, reads in flight, read latency and
    the limiting stage with its evidence.

    Args:
        result: what `run_bench` measured.
    """
    r = result
    epochs = "1 epoch" if r.epochs == 1 else f"{r.epochs} epochs"
    per_sample = r.chunks_read / r.samples if r.samples else 0.0
    fetched = (
        f"{r.fetched_mb_per_s:.1f}  ({r.bytes_fetched} stored bytes fetched)"
        if r.bytes_fetched
        else "-  (no object-store gets: local files are read directly)"
    )
    rows = [
        ("samples/s", f"{r.samples_per_s:.1f}  ({r.samples} samples in {r.batches} batches)"),
        ("MB/s decoded", f"{r.decoded_mb_per_s:.1f}  ({r.bytes_decoded} bytes into blocks)"),
        ("MB/s fetched", fetched),
        (
            "reads",
            f"{r.chunks_read} chunks ({per_sample:.2f} per sample of every variable), "
            f"{r.retries} retried",
        ),
        ("reads in flight", f"mean {r.reads_in_flight_mean:.1f}, max {r.reads_in_flight_max}"),
        ("read latency", f"p50 {_ms(r.latency_p50_s)}, p95 {_ms(r.latency_p95_s)}"),
        ("limiting stage", f"{r.limiting_stage}: {r.evidence}"),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [
        f"insitubatch bench  {r.store}",
        f"  split {r.split!r}, batch_size={r.batch_size}, device {r.device}, block_chunks="
        f"{r.block_chunks}, {r.decode_threads} decode threads: {r.seconds:.1f} s, {epochs}",
        "",
    ]
    lines += [f"  {name:<{width}}  {value}" for name, value in rows]
    return "\n".join(lines)
