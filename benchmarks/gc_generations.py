"""What a running loader sends to the garbage collector's oldest generation, and what the
full collections that follow cost (issue 33).

    python -m benchmarks.gc_generations                # 1 step per chunk, 12 epochs
    python -m benchmarks.gc_generations --epochs 24

CPython collects its oldest generation once the objects moved there since the last full
collection exceed a quarter of those it held then; a full collection walks every tracked
object of the process (about 200k once torch is imported, more with a model) and holds
the GIL wherever it lands. So what a loader keeps alive long enough to be moved there,
per chunk, sets how often that happens. A default loader (`build_loader`, batch 32, a
consumer that does nothing) runs one warm-up epoch, then `--epochs` epochs with
`gc.callbacks` counting, at each middle-generation collection, how many objects moved to
the oldest, and timing each full collection on the CPU clock of the thread it ran on.

It does not say which types moved: a callback that holds a list of the young objects
while running Python code lets another thread resume building a tuple the list refers to
(a `SystemError` in the loader). `len(gc.get_objects(...))` frees its list before any
other thread can run.
"""

from __future__ import annotations

import argparse
import gc
import time
from pathlib import Path
from typing import Any

from benchmarks.stores import ensure_store
from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import ERA5_VARIABLES

HERE = Path(__file__).resolve().parent


class GenerationWatch:
    """`gc.callbacks` entry: objects moved to the oldest generation, and full collections."""

    def __init__(self) -> None:
        self.moved = 0
        self.full_s: list[float] = []
        self._oldest_before = 0
        self._full_started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        generation = info["generation"]
        if generation == 1 and phase == "start":
            self._oldest_before = len(gc.get_objects(generation=2))
        elif generation == 1:
            self.moved += len(gc.get_objects(generation=2)) - self._oldest_before
        elif generation == 2 and phase == "start":
            self._full_started = time.thread_time()
        elif generation == 2:
            self.full_s.append(time.thread_time() - self._full_started)


def main(argv: list[str] | None = None) -> None:
    """Print what reached the oldest generation per chunk and what full collections cost.

    Args:
        argv: command-line arguments (default: `sys.argv[1:]`).
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps-per-chunk", type=int, default=1, choices=(1, 4, 24))
    parser.add_argument("--time-steps", type=int, default=960)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--cache", type=Path, default=HERE / ".cache")
    args = parser.parse_args(argv)
    path = ensure_store(args.cache, args.time_steps, args.steps_per_chunk, "zstd").resolve()
    loader = build_loader(str(path), list(ERA5_VARIABLES), split="all", batch_size=32, device="cpu")
    for _ in loader:  # warm: arrays opened, block memory leased once
        pass
    gc.collect()
    watch = GenerationWatch()
    before = gc.get_stats()
    gc.callbacks.append(watch)
    try:
        for _ in range(args.epochs):
            for _ in loader:
                pass
    finally:
        gc.callbacks.remove(watch)
        loader.close()
    after = gc.get_stats()
    chunks = args.epochs * args.time_steps // args.steps_per_chunk * len(ERA5_VARIABLES)
    counts = [b["collections"] - a["collections"] for a, b in zip(before, after, strict=True)]
    print(f"{chunks} chunks over {args.epochs} epochs; collections by generation {counts}")
    print(f"objects moved to the oldest generation: {watch.moved / chunks:.2f} a chunk")
    spent = sum(watch.full_s)
    each = ", ".join(f"{s * 1e3:.0f}" for s in watch.full_s) or "none"
    per_chunk = spent * 1e6 / chunks
    print(f"full collections: {len(watch.full_s)} (ms each: {each}), {per_chunk:.2f} us a chunk")
    print(f"objects the collector tracks now: {len(gc.get_objects())}")


if __name__ == "__main__":
    main()
