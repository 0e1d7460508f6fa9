"""Chunks a resumed pool shuffle reads: the rest of an epoch after a cut, through
`build_loader` with a pool of 78 units, counted by the fetch node, against reading every
block from the saved source position on (every unit from the oldest one still needed,
drained ones included: what a resume read before issue 17).

    .venv/bin/python -m benchmarks.resume_reads

Counts, not timings: an in-memory store of 400 units of one 24-step chunk each, so it
takes seconds and is the same on any machine.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import zarr

import insitubatch_nodes as ib
from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.state_checks import NODE_KEY

TIME_STEPS = 9600
STEPS_PER_CHUNK = 24
POOL_UNITS = 78
CUTS = (20, 60, 100, 150, 200, 250)  # batches taken before the state is saved


def _store() -> str:
    group = zarr.open_group(ib.memory_store("resume-reads"), mode="w")
    array = group.create_array(
        "t", shape=(TIME_STEPS, 4, 4), chunks=(STEPS_PER_CHUNK, 4, 4), dtype="float32"
    )
    array[...] = np.arange(TIME_STEPS * 16, dtype=np.float32).reshape(TIME_STEPS, 4, 4)
    return "memory://resume-reads"


def _saved_position(state: dict[str, Any]) -> int:
    """The unit position the saved source state resumes the unit order at."""
    part = state["root"]
    while part.get(NODE_KEY) != ib.ChunkPermuteNode.STATE_NAME:
        part = part["source"]
    return int(part["position"])


def main() -> None:
    url = _store()
    unit_bytes = STEPS_PER_CHUNK * 16 * 4

    def make() -> ib.Loader[Any]:
        return ib.build_loader(
            url, split="all", batch_size=32, shuffle_window=POOL_UNITS * unit_bytes, seed=1
        )

    units = TIME_STEPS // STEPS_PER_CHUNK
    print(f"{units} units of one chunk, a pool of {POOL_UNITS}, {len(make())} batches of 32")
    print("| cut (batches) | chunks read on resume | every block from the saved position |")
    print("|---|---|---|")
    for cut in CUTS:
        loader = make()
        iterator = iter(loader)
        for _ in range(cut):
            next(iterator)
        state = json.loads(json.dumps(loader.state_dict()))
        loader.close()
        fresh = make()
        fresh.load_state_dict(state)
        fetch = next(n for n in graph_nodes(fresh.root) if isinstance(n, ib.AsyncFetchNode))
        before = fetch.stats.chunks_read
        for _ in fresh:
            pass
        read = fetch.stats.chunks_read - before
        print(f"| {cut} | {read} | {units - _saved_position(state)} |")
        fresh.close()
    ib.forget_memory_store("resume-reads")


if __name__ == "__main__":
    main()
