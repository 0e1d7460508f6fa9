"""`insitubatch bench --png`: throughput and reads in flight over the run, as a PNG.

matplotlib is not a dependency of the library (it is in the `bench` extra): it is
imported only when a PNG is asked for, and `require_matplotlib` says so before the run
starts rather than after it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from insitubatch_nodes.cli.bench_run import BenchResult


def require_matplotlib() -> Any:
    """matplotlib's pyplot on a backend that needs no display, or an error saying how to
    get it.

    Raises:
        RuntimeError: matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError(
            "--png needs matplotlib, which is not installed: pip install matplotlib (or "
            "pip install 'insitubatch-nodes[bench]'), or leave --png out"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(result: BenchResult, path: Path) -> None:
    """Draw samples/s and reads in flight (the interval's mean, and the self-tuning
    target) over the run, into `path`.

    Args:
        result: what `run_bench` measured.
        path: the PNG file to write.

    Raises:
        RuntimeError: matplotlib is not installed.
    """
    plt = require_matplotlib()
    times = [p.t_s for p in result.series]
    figure, (rate, reads) = plt.subplots(2, 1, sharex=True, figsize=(8, 5))
    rate.plot(times, [p.samples_per_s for p in result.series], color="tab:blue")
    rate.set_ylabel("samples/s")
    rate.set_title(f"insitubatch bench  {result.store}", fontsize=9)
    reads.plot(times, [p.reads_in_flight for p in result.series], label="in flight (mean)")
    reads.step(
        times,
        [p.inflight_target for p in result.series],
        where="post",
        linestyle="--",
        label="target",
    )
    reads.set_ylabel("chunk reads")
    reads.set_xlabel("seconds")
    reads.legend(loc="upper right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
