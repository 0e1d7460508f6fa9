"""What a loader keeps alive per chunk while a pool holds its units (issue 33): objects
that live through two young collections reach the garbage collector's oldest generation,
and every quarter of it that arrives so brings a full collection (over every object of
the process, a model's included), which holds the GIL wherever it lands. At one time step
per chunk the block memory's slot tokens and the plans' chunk records were such objects,
1.4-1.8 a chunk; what remains must stay well under one a chunk."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from insitubatch_nodes import build_loader
from tests.helpers.stores import write_store

STEPS = 400
EPOCHS = 6
VARIABLES = {name: ((STEPS, 4, 4), (1, 4, 4), "float32") for name in ("a", "b", "c")}


def test_a_pool_loader_sends_few_objects_a_chunk_to_the_oldest_generation(
    tmp_path: Path,
) -> None:
    url, _ = write_store(tmp_path / "store.zarr", VARIABLES)
    loader = build_loader(url, split="all", batch_size=8, device="cpu")
    for _ in loader:  # warm: arrays opened, memory leased once
        pass
    moved = [0]
    before = [0]
    collections = [0]

    def count(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 1:
            return
        if phase == "start":
            before[0] = len(gc.get_objects(generation=2))
        else:
            moved[0] += len(gc.get_objects(generation=2)) - before[0]
            collections[0] += 1

    thresholds = gc.get_threshold()
    gc.collect()
    gc.set_threshold(700, 10, 1_000_000)  # Python's defaults, but no full collection
    gc.callbacks.append(count)
    try:
        for _ in range(EPOCHS):
            for _ in loader:
                pass
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*thresholds)
        loader.close()
    chunks = EPOCHS * STEPS * len(VARIABLES)
    assert collections[0] >= 1  # something was measured (1.4 a chunk before, 0.2 after)
    assert moved[0] / chunks < 0.5, f"{moved[0] / chunks:.2f} objects a chunk reached gen 2"
