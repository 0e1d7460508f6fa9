"""States dealt by version 1 of the short units' deal still resume exactly.

`data/states_dealt_by_version_1.json` holds what the code before deal versions (commit
f4c64df) saved and yielded on 2 ranks, over a split whose short units (its two edges,
under a window and a lead) that version dealt otherwise than `DEAL_VERSION` does: each
rank's epoch 0, its state 3 batches into epoch 1, the rest of epoch 1 and epoch 2 after
it; and both ranks' states gathered 2 batches into epoch 0 with what 1 and 3 ranks
resumed them into. The steps that made them are spelled out in `_saved_by_the_release`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from insitubatch_nodes import SampleSpec, build_loader, leads, window
from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY
from insitubatch_nodes.core.short_unit_deal import DEAL_VERSION
from insitubatch_nodes.loader.elastic_resume import find_node_state
from insitubatch_nodes.loader.rank_states import RANK_STATES_KEY
from insitubatch_nodes.nodes.chunk_permute import ChunkPermuteNode
from insitubatch_nodes.nodes.chunk_permute_state import DEAL_KEY
from insitubatch_nodes.nodes.state_checks import DIGEST_KEY, with_digest

SAVED = Path(__file__).parent / "data" / "states_dealt_by_version_1.json"
VARIABLES = {"a": ((61, 3), (4, 3), "float32"), "b": ((61,), (3,), "int16")}
SPEC = SampleSpec({"x": window(["a"], steps=2), "y": leads(["a"], [2])})


def _loader(url: str, rank: int, world_size: int) -> Any:
    """The loader the states were saved from."""
    return build_loader(
        url,
        split="all",
        spec=SPEC,
        batch_size=4,
        seed=3,
        device="cpu",
        max_inflight=2,
        shuffle="pool",
        rank=rank,
        world_size=world_size,
    )


def _ids(batches: Any) -> list[list[int]]:
    return [batch[SAMPLE_INDEX_KEY].tolist() for batch in batches]


@pytest.fixture(scope="module")
def saved() -> dict[str, Any]:
    return json.loads(SAVED.read_text())


@pytest.fixture
def url(memory_url: Any) -> Iterator[str]:
    yield memory_url(VARIABLES)[0]


def _permute_config(state: Any) -> dict[str, Any]:
    permute = find_node_state(state, ChunkPermuteNode.STATE_NAME)
    assert permute is not None
    return permute["config"]


def _saved_by_the_release(url: str, rank: int) -> tuple[list[list[int]], dict[str, Any]]:
    """What the release did for each rank: epoch 0 whole, then 3 batches of epoch 1."""
    with _loader(url, rank, 2) as loader:
        first = _ids(loader)
        iterator = iter(loader)
        for _ in range(3):
            next(iterator)
        return first, json.loads(json.dumps(loader.state_dict()))


def test_this_release_deals_the_split_otherwise(url: str, saved: dict[str, Any]) -> None:
    """The fixture is worth its keep: version 1 gave the ranks 31 and 27 anchors (both
    yield 31), `DEAL_VERSION` gives them 28 and 30, so epochs and states differ."""
    for rank, old in enumerate(saved["ranks"]):
        first, state = _saved_by_the_release(url, rank)
        assert sum(map(len, old["epoch_0"])) == 31
        assert sum(map(len, first)) == 30
        assert _permute_config(state)[DEAL_KEY] == DEAL_VERSION
        assert DEAL_KEY not in _permute_config(old["state"])


def test_a_state_dealt_by_version_1_resumes_into_its_batches(
    url: str, saved: dict[str, Any]
) -> None:
    """Version 1 is taken up from a state that names no version, and kept: the rest of
    the cut epoch and the whole next epoch are the release's."""
    for rank, old in enumerate(saved["ranks"]):
        with _loader(url, rank, 2) as loader:
            loader.load_state_dict(old["state"])
            assert len(loader) == len(old["rest"]) + 3
            assert _ids(loader) == old["rest"]
            assert _ids(loader) == old["next"]
            again = json.loads(json.dumps(loader.state_dict()))
        assert DEAL_KEY not in _permute_config(again)  # still dealt by version 1
        with _loader(url, rank, 2) as fresh:  # and resumed so once more
            fresh.load_state_dict(again)
            assert len(_ids(fresh)) == len(old["next"])


def test_states_dealt_by_version_1_resume_on_other_world_sizes(
    url: str, saved: dict[str, Any]
) -> None:
    """Elastic resume re-deals the rest of the units the old ranks held under version 1."""
    for world_size in (1, 3):
        rests = []
        for rank in range(world_size):
            with _loader(url, rank, world_size) as loader:
                loader.load_state_dict(saved["elastic"]["state"])
                rests.append(_ids(loader))
        assert rests == saved["elastic"][f"on_{world_size}"]


def _dealt_by_a_later_release(state: dict[str, Any]) -> dict[str, Any]:
    """`state` as a release with a later deal would have saved it (digest and all)."""
    state = json.loads(json.dumps(state))
    _permute_config(state)[DEAL_KEY] = DEAL_VERSION + 1
    return with_digest({k: v for k, v in state.items() if k != DIGEST_KEY})


def test_a_deal_version_this_library_does_not_deal_is_refused(url: str) -> None:
    refused = rf"deal version {DEAL_VERSION + 1} is not one this library deals"
    states = []
    for rank in range(2):
        with _loader(url, rank, 2) as loader:
            states.append(_dealt_by_a_later_release(loader.state_dict()))
            loader.load_state_dict(states[-1])
            with pytest.raises(ValueError, match=refused):
                next(iter(loader))
    with _loader(url, 0, 3) as loader, pytest.raises(ValueError, match=refused):
        loader.load_state_dict({RANK_STATES_KEY: states})  # re-dealt at once
