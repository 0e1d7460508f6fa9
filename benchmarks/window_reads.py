"""Store reads per sample for forecast windows: one epoch of a 2-step window (and of a
2-step window plus a t+1 target) through `build_loader`, counted by the fetch node, against
one read per step per sample (what a per-sample loader issues).

    .venv/bin/python -m benchmarks.window_reads

Counts, not timings: in-memory stores, so it takes seconds and is the same on any machine.
"""

from __future__ import annotations

import numpy as np
import zarr

import insitubatch_nodes as ib
from insitubatch_nodes.nodes.graph import graph_nodes

TIME_STEPS = 1024
CASES = [  # (steps per chunk, steps per unit, units per block)
    (8, 8, 4),
    (4, 4, 4),
    (1, 1, 8),
    (1, 8, 8),
]


def _store(name: str, steps_per_chunk: int) -> str:
    group = zarr.open_group(ib.memory_store(name), mode="w")
    array = group.create_array(
        "t", shape=(TIME_STEPS, 4, 4), chunks=(steps_per_chunk, 4, 4), dtype="float32"
    )
    array[...] = np.arange(TIME_STEPS * 16, dtype=np.float32).reshape(TIME_STEPS, 4, 4)
    return f"memory://{name}"


def main() -> None:
    specs = {
        "2-step window": ib.SampleSpec({"x": ib.window(["t"], steps=2)}),
        "2-step window + t+1": ib.SampleSpec(
            {"x": ib.window(["t"], steps=2), "y": ib.leads(["t"], [1])}
        ),
    }
    print("| steps/chunk | steps/unit | units/block | sample | reads/sample | per-step reads |")
    print("|---|---|---|---|---|---|")
    for i, (chunk, unit, block) in enumerate(CASES):
        url = _store(f"window-reads-{i}", chunk)
        source = ib.ZarrSource.open(url)
        geometry = ib.SampleGeometry.from_layouts(source.layouts, unit_length=unit)
        manifest = ib.make_manifest(geometry, {"train": 1.0})
        for label, spec in specs.items():
            loader = ib.build_loader(
                url,
                split="train",
                manifest=manifest,
                spec=spec,
                batch_size=16,
                block_chunks=block,
            )
            samples = sum(len(b[ib.SAMPLE_INDEX_KEY]) for b in loader)
            fetch = next(n for n in graph_nodes(loader.root) if isinstance(n, ib.AsyncFetchNode))
            steps = sum(len(g.offsets) for g in spec.groups.values())
            print(
                f"| {chunk} | {unit} | {block} | {label} | "
                f"{fetch.stats.chunks_read / samples:.3f} | {steps} |"
            )
        ib.forget_memory_store(f"window-reads-{i}")


if __name__ == "__main__":
    main()
