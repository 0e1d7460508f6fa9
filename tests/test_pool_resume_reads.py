"""A resumed pool shuffle reads the units it still needs: the resident units, those not
entered yet and, when the rank pads, its epoch's last unit."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from graphs import build_stage

from insitubatch_nodes import Loader
from insitubatch_nodes.items import SAMPLE_INDEX_KEY


def pool_part(state: dict[str, Any]) -> dict[str, Any]:
    part = state["root"]
    while part.get("node") != "PoolShuffleNode":
        part = part["source"]
    return part


def test_a_rest_that_pads_from_a_last_unit_drained_before_the_cut_reads_it(
    memory_url: Any,
) -> None:
    """Rank 2 of 3 holds 4 units, the last a short one of 2 samples, and pads its 11
    samples to 12. Cut after 2 batches of 5: the last unit entered and drained before the
    cut, the one resident unit holds the last real sample, and the last batch pads from
    the last unit, which no unit entering reads."""
    url, _ = memory_url({"a": ((35, 2), (1, 1), "float32"), "b": ((35, 1), (3, 1), "int16")})

    def make() -> Any:
        return build_stage(
            url, "gather", rank=2, world_size=3, block_chunks=1, batch_size=5, pool_size=1
        )

    whole = [batch[SAMPLE_INDEX_KEY].copy() for batch in Loader(make())]
    loader = Loader(make())
    iterator = iter(loader)
    for _ in range(2):
        next(iterator)
    state = json.loads(json.dumps(loader.state_dict()))
    pool = pool_part(state)
    assert pool["next_unit"] == 4 and pool["samples_this_epoch"] == 12
    fresh = Loader(make())
    fresh.load_state_dict(state)
    got = [batch[SAMPLE_INDEX_KEY] for batch in fresh]
    assert len(got) == 1 and np.array_equal(got[0], whole[2])
