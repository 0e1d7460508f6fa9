"""States saved by release 0.1.0 still load: `data/states_saved_by_0.1.0.json` holds states
that release's code saved (at commit 76f86ac, before the nodes declared the names their
states are saved under), each with the sample ids it resumed them into. They must resume
into the same batches, and the same steps must still save the same bytes: the state format
is the nodes' names (`NODE_KEY`), keys and cursors, and a restructuring changes none."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from insitubatch_nodes import build_loader
from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY
from insitubatch_nodes.loader.rank_states import RANK_STATES_KEY

SAVED = Path(__file__).parent / "data" / "states_saved_by_0.1.0.json"
VARIABLES = {"a": ((61, 3), (4, 3), "float32"), "b": ((61,), (3,), "int16")}


def _loader(url: str, shuffle: str, **kwargs: Any) -> Any:
    """The loader the states were saved from (`rank` and `world_size` in `kwargs`)."""
    return build_loader(
        url,
        split="all",
        batch_size=4,
        seed=3,
        device="cpu",
        max_inflight=2,
        shuffle=shuffle,
        **kwargs,
    )


def _saved(case: str) -> dict[str, Any]:
    return json.loads(SAVED.read_text())[case]


def _state_at_the_cut(url: str, shuffle: str) -> dict[str, Any]:
    """What the release did to save a one-rank state: epoch 0 whole, then 3 batches."""
    with _loader(url, shuffle) as loader:
        list(loader)
        iterator = iter(loader)
        for _ in range(3):
            next(iterator)
        return json.loads(json.dumps(loader.state_dict()))


@pytest.mark.parametrize("shuffle", ["pool", "block"])
def test_a_state_saved_by_the_release_resumes_into_the_same_batches(
    memory_url: Any, shuffle: str
) -> None:
    saved = _saved(shuffle)
    url, _ = memory_url(VARIABLES)
    with _loader(url, shuffle) as loader:
        loader.load_state_dict(saved["state"])
        assert [b[SAMPLE_INDEX_KEY].tolist() for b in loader] == saved["rest"]


@pytest.mark.parametrize("shuffle", ["pool", "block"])
def test_the_same_steps_save_the_same_state(memory_url: Any, shuffle: str) -> None:
    url, _ = memory_url(VARIABLES)
    assert _state_at_the_cut(url, shuffle) == _saved(shuffle)["state"]


def test_two_ranks_states_saved_by_the_release_resume_on_one(memory_url: Any) -> None:
    saved = _saved("two_ranks_on_one")
    url, _ = memory_url(VARIABLES)
    group = [_loader(url, "pool", rank=r, world_size=2) for r in range(2)]
    iterators = [iter(loader) for loader in group]
    for iterator in iterators:
        for _ in range(2):
            next(iterator)
    states = json.loads(json.dumps({RANK_STATES_KEY: [g.state_dict() for g in group]}))
    for loader in group:
        loader.close()
    assert states == saved["state"]
    with _loader(url, "pool") as one:
        one.load_state_dict(saved["state"])
        assert [b[SAMPLE_INDEX_KEY].tolist() for b in one] == saved["rest"]
