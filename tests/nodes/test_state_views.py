"""States kept between nodes without a copy per pull (`nodes.state_views`): what
`state_dict()` returns, at any node of the graph, is still a snapshot. Later pulls, into
the next epoch too, leave a state already returned as it was, and wrecking a returned
state changes neither the node nor the states it returns after."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from insitubatch_nodes import build_loader
from insitubatch_nodes.cli.synthetic import WB2_STATICS, write_weatherbench2_like
from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.state_views import SharesState


def _wreck(state: Any) -> None:
    """Empty every dict and list inside `state`, depth first."""
    children = state.values() if isinstance(state, dict) else state
    for child in list(children):
        if isinstance(child, dict | list):
            _wreck(child)
    state.clear()


def _stacked_with_statics(folder: Path, shuffle: str) -> Any:
    """A stacked loader with static fields and forcings: the static, forcings and stacking
    nodes sit below the device node, which reads their states after every batch."""
    path = write_weatherbench2_like(folder / "wb2.zarr", time_steps=24, grid=(8, 16))
    return build_loader(
        str(path),
        variables=["2m_temperature", *WB2_STATICS],
        split="all",
        batch_size=5,
        max_inflight=2,
        device="cpu",
        shuffle=shuffle,
        stack=True,
        forcings=["cos_solar_zenith_angle", "year_progress_sin"],
    )


@pytest.mark.parametrize("graph", ["plain", "stacked with statics"])
@pytest.mark.parametrize("shuffle", ["pool", "block"])
def test_a_returned_state_is_a_snapshot_that_later_pulls_and_edits_do_not_change(
    memory_url: Any, tmp_path: Path, shuffle: str, graph: str
) -> None:
    if graph == "plain":
        url, _ = memory_url()
        loader = build_loader(
            url, split="all", batch_size=5, max_inflight=2, device="cpu", shuffle=shuffle
        )
    else:
        loader = _stacked_with_statics(tmp_path, shuffle)
    nodes = graph_nodes(loader.root)
    # the views are in use: every node the device node reads a state from after each
    # batch offers one, or that read deep-copies the nested states per batch
    below_the_root = [n for n in nodes if n is not loader.root]
    assert len(below_the_root) >= 5
    assert all(isinstance(n, SharesState) for n in below_the_root), [
        type(n).__name__ for n in below_the_root if not isinstance(n, SharesState)
    ]
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    returned = [node.state_dict() for node in nodes]
    whole = loader.state_dict()
    kept = copy.deepcopy(returned), copy.deepcopy(whole)
    for _ in iterator:  # the rest of the epoch, and the next one's first batch
        pass
    next(iter(loader))
    assert (returned, whole) == kept


@pytest.mark.parametrize("shuffle", ["pool", "block"])
def test_states_handed_out_share_nothing_with_what_the_nodes_keep(
    memory_url: Any, shuffle: str
) -> None:
    url, _ = memory_url()
    loader = build_loader(
        url, split="all", batch_size=5, max_inflight=2, device="cpu", shuffle=shuffle
    )
    iterator = iter(loader)
    for _ in range(2):
        next(iterator)
    before = loader.state_dict()
    expected = copy.deepcopy(before)
    _wreck(before)
    assert loader.state_dict() == expected
    for node in graph_nodes(loader.root):
        state = node.state_dict()
        expected = copy.deepcopy(state)
        _wreck(state)
        assert node.state_dict() == expected
