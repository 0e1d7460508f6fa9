"""A split too small for a hand-built graph's settings is refused by name and with its
numbers: more ranks than the split has units (counted on the graph's grid, and only the
units a window leaves an anchor in) when the graph is built, and `drop_last` with a batch
the smallest rank's share cannot fill when the first block reaches the shuffle, pool or
block. The property tests draw only settings a split can serve
(`tests.helpers.loader_settings`); these are the refusals of the others."""

from __future__ import annotations

from typing import Any

import pytest

from insitubatch_nodes import Loader, SampleSpec, window
from tests.helpers.graphs import build_stage

# 5 units of 2 samples: dealt to 2 ranks, shares of 6 and 4 samples
FIVE_UNITS = {"a": ((10, 2), (2, 1), "float32")}


@pytest.mark.parametrize(
    ("variables", "spec", "unit_length", "units"),
    [
        pytest.param({"a": ((8, 2), (4, 1), "float32")}, None, None, 2, id="store grid"),
        pytest.param(
            {"a": ((12, 2), (4, 1), "float32"), "b": ((12, 1), (6, 1), "int16")},
            None,
            4,
            3,
            id="fine grid",  # 3 units of 4 steps, where the chunks' common grid has 1
        ),
        pytest.param(
            {"a": ((8, 2), (2, 1), "float32")},
            SampleSpec({"x": window(["a"], steps=3)}),
            None,
            3,
            id="window",  # 4 units; the first holds no anchor whose window stays inside
        ),
    ],
)
def test_more_ranks_than_units_are_refused_when_the_graph_is_built(
    memory_url: Any,
    variables: dict[str, Any],
    spec: SampleSpec | None,
    unit_length: int | None,
    units: int,
) -> None:
    url, _ = memory_url(variables)

    def make(world_size: int) -> Any:
        return build_stage(
            url, "gather", world_size=world_size, spec=spec, unit_length=unit_length, pool_size=2
        )

    assert list(Loader(make(units)))  # one unit for each rank: served
    with pytest.raises(
        ValueError,
        match=rf"^the split has {units} chunk-aligned units, fewer than world_size={units + 1}: "
        r"every rank needs at least one; use fewer ranks or a larger split$",
    ):
        make(units + 1)


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("pool_size", [None, 3], ids=["block", "pool"])
def test_drop_last_with_no_full_batch_is_refused_at_the_first_block(
    memory_url: Any, pool_size: int | None, rank: int
) -> None:
    """Either rank refuses, the one with the larger share too: every rank steps as often
    as the smallest share allows. A hand-built graph has no `build_loader` to check the
    shares first, so the shuffle refuses when its first block arrives."""
    url, _ = memory_url(FIVE_UNITS)

    def make(batch_size: int) -> Loader[Any]:
        root = build_stage(
            url,
            "gather",
            rank=rank,
            world_size=2,
            batch_size=batch_size,
            drop_last=True,
            pool_size=pool_size,
        )
        return Loader(root)

    assert [len(batch["sample_index"]) for batch in make(4)] == [4]  # the smallest share fills one
    refused = make(5)  # built: the shuffle learns the shares from its first block
    with pytest.raises(
        ValueError,
        match=r"^batch_size=5 with drop_last=True leaves no full batch: the smallest rank has "
        r"4 samples; lower batch_size or set drop_last=False$",
    ):
        next(iter(refused))
