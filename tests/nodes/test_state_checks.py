"""A loaded state belongs to the graph it is loaded into, or it is refused with the reason.

States are taken from real loaders over real zarr stores, and loaded into loaders over
other stores, splits, variable selections, snapshots and graphs; or damaged (a cursor out
of range or of the wrong type, keys missing, not a dict). Each is refused naming what
differs; an untouched state still resumes exactly.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st

from insitubatch_nodes import (
    AsyncFetchNode,
    ChunkPermuteNode,
    GatherNode,
    Loader,
    PinToDeviceNode,
    ReadPlanNode,
    ShuffleBlockNode,
    ZarrSource,
    build_loader,
    compute_stats,
    make_manifest,
    open_icechunk,
)
from tests.helpers.batches import torch_roundtrip
from tests.helpers.graphs import build_stage, fingerprint
from tests.helpers.profiles import loader_property
from tests.helpers.resume_check import check_every_cut, uninterrupted
from tests.helpers.stores import write_store
from tests.helpers.threads import our_threads, threads_left_by_earlier_tests

StatePath = tuple[str, ...]
PERMUTE: StatePath = ("root", "source", "source", "source", "source", "source")  # default graph
SHUFFLE: StatePath = ("root", "source", "source")


def _at(state: dict[str, Any], path: StatePath) -> dict[str, Any]:
    for key in path:
        state = state[key]
    return state


def _state_after(loader: Loader[Any], batches: int) -> dict[str, Any]:
    iterator = iter(loader)
    for _ in range(batches):
        next(iterator)
    return torch_roundtrip(loader.state_dict())


def _refused(loader: Loader[Any], state: dict[str, Any]) -> str:
    """The message of the error loading `state` into `loader` gives, by the first batch."""
    with pytest.raises((ValueError, TypeError)) as raised:
        loader.load_state_dict(state)
        next(iter(loader))
    return str(raised.value)


def _plain(value: Any) -> bool:
    """Only what json and torch.load(weights_only=True) take back unchanged."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or type(value) in (int, bool, str)


# --- Settings given as numpy scalars leave a plain state that resumes exactly.


def _numpy_settings_loader(url: str) -> Loader[Any]:
    return build_loader(
        url,
        split="all",
        batch_size=np.int64(7),
        block_chunks=np.int32(2),
        seed=np.uint8(3),
        rank=np.int64(0),
        world_size=np.int64(1),
        drop_last=np.bool_(False),
        max_inflight=np.int16(4),
        prefetch_blocks=np.int64(2),
        memory_budget=np.int64(1 << 26),
        spatial_dims=np.int64(2),
        device="cpu",
        device_prefetch=np.int64(1),
    )


def test_numpy_settings_give_a_plain_state_that_resumes_exactly(memory_url: Any) -> None:
    url, _ = memory_url()

    def plain() -> Any:
        return build_loader(
            url,
            split="all",
            batch_size=7,
            block_chunks=2,
            seed=3,
            rank=0,
            world_size=1,
            drop_last=False,
            max_inflight=4,
            device="cpu",
            device_prefetch=1,
        ).root

    epoch0, epoch1 = uninterrupted(plain, 2)
    cut = 3
    loader = _numpy_settings_loader(url)
    iterator = iter(loader)
    for _ in range(cut):
        next(iterator)
    state = loader.state_dict()
    assert _plain(state), state
    as_json = json.loads(json.dumps(state))
    assert as_json == state
    assert torch_roundtrip(state) == state
    for saved in (as_json, torch_roundtrip(state)):
        fresh = _numpy_settings_loader(url)
        fresh.load_state_dict(saved)
        assert [fingerprint(b) for b in fresh] == epoch0[cut:]
        assert [fingerprint(b) for b in fresh] == epoch1


def test_numpy_settings_resume_at_every_cut(memory_url: Any) -> None:
    url, _ = memory_url()
    check_every_cut(lambda: _numpy_settings_loader(url).root)


def test_a_state_stays_small_and_holds_no_url(memory_url: Any, tmp_path: Path) -> None:
    url, _ = write_store(tmp_path / "secret-name.zarr")
    state = _state_after(build_loader(url, batch_size=8, device="cpu"), 1)
    text = json.dumps(state)
    assert "secret-name" not in text and str(tmp_path) not in text
    assert len(text) < 1500


# --- States saved on other data are refused, naming the difference.


def _saved(url: str, **options: Any) -> dict[str, Any]:
    return _state_after(build_loader(url, batch_size=5, device="cpu", **options), 2)


def test_a_state_from_another_store_is_refused(memory_url: Any) -> None:
    url, _ = memory_url()
    other, _ = memory_url({"t2m": ((96, 3, 4), (3, 3, 2), "float32")})
    state = _saved(url, variables=["t2m"])
    message = _refused(build_loader(other, ["t2m"], batch_size=5, device="cpu"), state)
    assert "array 't2m' shape was (88, 3, 4) when the state was saved, now (96, 3, 4)" in message
    assert "split 'train' had 24 units, now 26" in message
    assert message.startswith("this state was saved on other data than this loader reads")


def test_a_state_from_another_split_is_refused(memory_url: Any) -> None:
    url, _ = memory_url()
    message = _refused(build_loader(url, split="val", batch_size=5), _saved(url))
    assert "the state was saved on split 'train', this loader reads split 'val'" in message


def test_a_state_from_another_variable_selection_is_refused(memory_url: Any) -> None:
    url, _ = memory_url()
    message = _refused(build_loader(url, ["t2m"], batch_size=5), _saved(url))
    assert "the state was saved on arrays ['t2m', 'u10'], this loader reads ['t2m']" in message


def test_a_state_from_a_differently_cut_manifest_is_refused(memory_url: Any) -> None:
    url, _ = memory_url({"a": ((96, 2), (4, 2), "float32")})  # 24 units: halves of 12
    geometry = ZarrSource.open(url).geometry
    first = make_manifest(geometry, {"train": 0.5, "val": 0.5})
    second = make_manifest(geometry, {"val": 0.5, "train": 0.5})
    state = _saved(url, manifest=first)
    assert first.units("train").size == second.units("train").size == 12
    assert first.units("train").tolist() != second.units("train").tolist()
    message = _refused(build_loader(url, manifest=second, batch_size=5), state)
    assert "split 'train' holds other units than when the state was saved" in message


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            lambda group: group["t2m"].resize((96, 3, 4)),
            "array 't2m' shape was (88, 3, 4) when the state was saved, now (96, 3, 4)",
        ),
        (
            lambda group: group.create_array(
                "t2m", shape=(88, 3, 4), chunks=(6, 3, 2), dtype="float32", overwrite=True
            ),
            "array 't2m' chunks were (3, 3, 2) when the state was saved, now (6, 3, 2)",
        ),
        (
            lambda group: group.create_array(
                "t2m", shape=(88, 3, 4), chunks=(3, 3, 2), dtype="float64", overwrite=True
            ),
            "array 't2m' dtype was float32 when the state was saved, now float64",
        ),
        (
            lambda group: group.create_array(
                "t2m",
                shape=(88, 3, 4),
                chunks=(3, 3, 2),
                dtype="float32",
                compressors=None,
                overwrite=True,
            ),
            "array 't2m' codecs were 'bytes+zstd' when the state was saved, now 'bytes'",
        ),
    ],
    ids=["shape", "chunks", "dtype", "codecs"],
)
def test_a_state_from_before_the_store_was_edited_is_refused(
    tmp_path: Path, edit: Callable[[zarr.Group], Any], expected: str
) -> None:
    path = tmp_path / "era5.zarr"
    url, _ = write_store(path)
    state = _saved(url, variables=["t2m"], split="all")
    edit(zarr.open_group(str(path), mode="r+"))
    assert expected in _refused(build_loader(url, ["t2m"], split="all", batch_size=5), state)


def test_a_state_from_another_icechunk_snapshot_is_refused(tmp_path: Path) -> None:
    icechunk = pytest.importorskip("icechunk")
    path = tmp_path / "repo"
    repo = icechunk.Repository.create(icechunk.local_filesystem_storage(str(path)))
    session = repo.writable_session("main")
    write_store(session.store)
    first = session.commit("first")
    session = repo.writable_session("main")
    zarr.open_group(session.store, mode="r+")["u10"][0] = 5  # same layout, other values
    second = session.commit("second")
    state = _saved(open_icechunk(path, snapshot_id=first))
    again = build_loader(open_icechunk(path, snapshot_id=first), batch_size=5, device="cpu")
    again.load_state_dict(state)
    next(iter(again))  # the same snapshot resumes
    message = _refused(build_loader(open_icechunk(path), batch_size=5), state)
    assert f"the Icechunk snapshot was {first!r} when the state was saved, now {second!r}" in (
        message
    )
    assert "open_icechunk(..., snapshot_id=...)" in message


def test_an_old_state_without_fingerprint_or_node_names_still_resumes(memory_url: Any) -> None:
    url, _ = memory_url()

    def make() -> Any:
        return build_loader(url, split="all", batch_size=5, block_chunks=2, shuffle="block").root

    epoch0 = uninterrupted(make, 1)[0]
    state = _state_after(Loader(make()), 3)

    def strip(part: Any) -> Any:
        if isinstance(part, dict):
            return {
                k: strip(v) for k, v in part.items() if k not in ("node", "fingerprint", "digest")
            }
        return part

    old = strip(state)
    assert "fingerprint" not in json.dumps(old)
    fresh = Loader(make())
    fresh.load_state_dict(old)
    assert [fingerprint(b) for b in fresh] == epoch0[3:]


def _by_hand(url: str, with_fingerprint: bool) -> Loader[Any]:
    """Getting started's "The same graph, by hand", recording what it reads."""
    source = ZarrSource.open(url)
    units = ChunkPermuteNode(
        source.geometry,
        source.split_units("train"),
        seed=0,
        fingerprint=source.fingerprint("train") if with_fingerprint else None,
    )
    plans = ReadPlanNode(units, source.geometry, block_chunks=2)
    blocks = AsyncFetchNode(plans, source.read_context(max_inflight=4))
    draws = ShuffleBlockNode(blocks, batch_size=4)
    return Loader(PinToDeviceNode(GatherNode(draws), device="cpu"))


def test_a_graph_composed_by_hand_checks_its_fingerprint(memory_url: Any) -> None:
    url, _ = memory_url()
    other, _ = memory_url({"t2m": ((88, 3, 4), (3, 3, 2), "float32")})
    state = _state_after(_by_hand(url, with_fingerprint=True), 1)
    message = _refused(_by_hand(other, with_fingerprint=True), state)
    assert "the state was saved on arrays ['t2m', 'u10'], this loader reads ['t2m']" in message
    same = _by_hand(url, with_fingerprint=True)
    same.load_state_dict(state)
    next(iter(same))
    unchecked = _by_hand(url, with_fingerprint=False)  # records and checks nothing
    unchecked.load_state_dict(state)
    next(iter(unchecked))
    assert "fingerprint" not in json.dumps(_state_after(_by_hand(url, False), 1))


# --- A state from a graph with a stage more or less is refused naming the stage.


@pytest.fixture
def stats_file(memory_url: Any, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    url, _ = memory_url({"t2m": ((88, 3, 4), (3, 3, 2), "float32")})
    path = tmp_path / "stats.json"
    compute_stats(url, split="train").save(path)
    yield url, path


@pytest.mark.parametrize(
    ("saved_with", "loaded_with", "expected"),
    [
        (
            {"stack": True},
            {},
            "the state holds a StackChannelsNode where this graph has a GatherNode",
        ),
        (
            {},
            {"stack": True},
            "the state holds a GatherNode where this graph has a StackChannelsNode",
        ),
        (
            {"normalise": True},
            {},
            "the state holds a NormaliseNode where this graph has a PinToDeviceNode",
        ),
        (
            {},
            {"normalise": True},
            "the state holds a PinToDeviceNode where this graph has a NormaliseNode",
        ),
    ],
)
def test_a_state_from_a_graph_with_a_stage_more_or_less_is_refused(
    stats_file: tuple[str, Path],
    saved_with: dict[str, Any],
    loaded_with: dict[str, Any],
    expected: str,
) -> None:
    url, stats = stats_file

    def make(options: dict[str, Any]) -> Loader[Any]:
        if options.pop("normalise", False):
            options["normalise"] = stats
        return build_loader(url, batch_size=5, device="cpu", **options)

    message = _refused(make(dict(loaded_with)), _state_after(make(dict(saved_with)), 2))
    assert message.startswith(expected), message
    assert "build the loader with the stages it had when the state was saved" in message


def test_a_hand_built_graph_without_its_last_stage_is_refused(memory_url: Any) -> None:
    url, _ = memory_url()
    state = _state_after(Loader(build_stage(url, "gather")), 1)
    message = _refused(Loader(build_stage(url, "device")), state)
    assert message.startswith("the state holds a GatherNode where this graph has a PinToDeviceNode")


# --- A state that is not the dict a loader writes.


def test_a_state_that_is_not_a_dict_is_refused(memory_url: Any) -> None:
    url, _ = memory_url()
    loader = build_loader(url, batch_size=5)
    with pytest.raises(TypeError, match=r"^the Loader state must be a dict, got list \[1, 2\]"):
        loader.load_state_dict([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^the Loader state lacks \['num_yielded'\]"):
        loader.load_state_dict({"root": {}})
    state = _saved(url)
    state["root"]["source"] = ["not", "a", "state"]
    message = _refused(build_loader(url, batch_size=5), state)
    assert message.startswith("the GatherNode state must be a dict, got list")


@pytest.mark.parametrize(
    ("shuffle", "node"), [("pool", "PoolShuffleNode"), ("block", "ShuffleBlockNode")]
)
def test_a_node_state_missing_keys_is_refused(memory_url: Any, shuffle: str, node: str) -> None:
    url, _ = memory_url()
    state = _saved(url, shuffle=shuffle)
    del _at(state, SHUFFLE)["samples_yielded"]
    message = _refused(build_loader(url, batch_size=5, shuffle=shuffle), state)
    assert message.startswith(f"the {node} state lacks ['samples_yielded']")


def test_a_node_state_handed_to_the_loader_is_refused(memory_url: Any) -> None:
    url, _ = memory_url()
    loader = build_loader(url, batch_size=5)
    with pytest.raises(ValueError, match=r"the Loader state lacks \['root', 'num_yielded'\]"):
        loader.load_state_dict(_saved(url)["root"])


# --- Damaged cursors: each is refused naming the node, the key, the value and the range.

CURSORS: dict[str, tuple[StatePath, str]] = {
    # name: (path of the node's state in the block shuffle's graph, the node's class)
    "epoch": (PERMUTE, "ChunkPermuteNode"),
    "position": (PERMUTE, "ChunkPermuteNode"),
    "drawn_in_oldest_block": (SHUFFLE, "ShuffleBlockNode"),
    "samples_yielded": (SHUFFLE, "ShuffleBlockNode"),
    "samples_this_epoch": (SHUFFLE, "ShuffleBlockNode"),
    "num_yielded": ((), "Loader"),
}
UNBOUNDED = ("epoch", "num_yielded")  # any int >= 0 is a place the loader can be at

WRONG_TYPES = st.one_of(
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)


@st.composite
def corruptions(draw: st.DrawFn) -> tuple[str, Any]:
    key = draw(st.sampled_from(sorted(CURSORS)))
    bad = [WRONG_TYPES, st.integers(max_value=-1)]
    if key not in UNBOUNDED:
        bad.append(st.integers(10**4, 10**12))  # past anything this small store holds
    return key, draw(st.one_of(*bad))


def _damaged_loader(url: str) -> Loader[Any]:
    return build_loader(
        url, split="all", batch_size=5, block_chunks=2, device="cpu", shuffle="block"
    )


@loader_property(60)
@given(corruption=corruptions(), cut=st.integers(1, 10))
def test_a_damaged_cursor_is_refused(
    memory_url: Any, corruption: tuple[str, Any], cut: int
) -> None:
    url, _ = memory_url()
    key, value = corruption
    path, node = CURSORS[key]
    state = _state_after(_damaged_loader(url), cut)
    _at(state, path)[key] = value
    message = _refused(_damaged_loader(url), state)
    assert message.startswith(f"the {node} state's {key!r} "), message
    assert repr(value)[:20] in message or str(value) in message


@loader_property(15)
@given(cut=st.integers(0, 18))
def test_an_untouched_state_resumes_exactly(memory_url: Any, cut: int) -> None:
    url, _ = memory_url()
    epoch0, epoch1 = uninterrupted(lambda: _damaged_loader(url).root, 2)
    cut = min(cut, len(epoch0))
    state = _state_after(_damaged_loader(url), cut)
    assert json.loads(json.dumps(state)) == state
    fresh = _damaged_loader(url)
    fresh.load_state_dict(copy.deepcopy(state))
    rest = [fingerprint(b) for b in fresh]
    assert rest == (epoch0[cut:] if cut < len(epoch0) else epoch1)


def test_cursor_errors_name_the_allowed_range(memory_url: Any) -> None:
    url, _ = memory_url()
    state = _state_after(_damaged_loader(url), 2)
    _at(state, PERMUTE)["position"] = 99  # split "all": 88 steps in units of 6, so 15 units
    assert _refused(_damaged_loader(url), state) == (
        "the ChunkPermuteNode state's 'position' is 99, outside the allowed range 0 .. 15: the "
        "state is damaged or was saved by another loader; pass the dict loader.state_dict() "
        "returned, as it was saved, into a loader built like the one that saved it"
    )
    state = _state_after(_damaged_loader(url), 2)
    _at(state, PERMUTE)["epoch"] = 1.0
    assert _refused(_damaged_loader(url), state) == (
        "the ChunkPermuteNode state's 'epoch' must be an int >= 0, got 1.0 (float): the state "
        "is damaged; pass the dict loader.state_dict() returned, as it was saved"
    )


def test_a_restored_state_keeps_its_plain_types(memory_url: Any) -> None:
    """What a resumed loader saves again is as plain as what it loaded."""
    url, _ = memory_url()
    state = _state_after(_damaged_loader(url), 3)
    fresh = _damaged_loader(url)
    fresh.load_state_dict(state)
    iterator = iter(fresh)
    next(iterator)
    again = fresh.state_dict()
    assert _plain(again)
    assert torch_roundtrip(again) == again


def test_a_damaged_fingerprint_is_refused(memory_url: Any) -> None:
    url, _ = memory_url()
    state = _saved(url)
    _at(state, PERMUTE)["fingerprint"] = ["not", "a", "fingerprint"]
    message = _refused(build_loader(url, batch_size=5), state)
    assert "the state's record of the data it was saved on is damaged" in message


def test_codecs_are_named_with_a_shards_inner_chain_and_fill_values_are_recorded(
    tmp_path: Path,
) -> None:
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    group.create_array(
        "t2m", shape=(24, 3, 4), chunks=(2, 3, 2), shards=(6, 3, 4), dtype="float32"
    )[...] = 1.0
    source = ZarrSource.open(str(tmp_path / "s.zarr"))
    assert source.codecs["t2m"] == "sharding_indexed(bytes+zstd)"
    assert source.fingerprint("all")["arrays"]["t2m"]["fill_value"] == "0.0"


def test_a_state_from_before_the_fill_value_changed_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "era5.zarr"
    url, _ = write_store(path, {"t2m": ((88, 3, 4), (3, 3, 2), "float32")})
    state = _saved(url)
    values = zarr.open_group(str(path), mode="r")["t2m"][...]
    rewritten = zarr.open_group(str(path), mode="r+").create_array(
        "t2m", shape=(88, 3, 4), chunks=(3, 3, 2), dtype="float32", fill_value=-1.0, overwrite=True
    )
    rewritten[...] = values
    message = _refused(build_loader(url, batch_size=5), state)
    assert "array 't2m' fill value was 0.0 when the state was saved, now -1.0" in message


def test_a_cursor_edited_to_another_value_in_range_is_refused(memory_url: Any) -> None:
    """Range checks cannot see a cursor moved by a few samples (the epoch would skip or
    repeat them): the digest the state was saved with does."""
    url, _ = memory_url()

    def make() -> Any:
        return build_loader(url, split="all", batch_size=5, block_chunks=2, shuffle="block").root

    state = _state_after(Loader(make()), 3)
    shuffle = state["root"]["source"]["source"]
    assert shuffle["node"] == "ShuffleBlockNode" and shuffle["samples_yielded"] == 15
    for key, value in (("samples_yielded", 12), ("drawn_in_oldest_block", 0)):
        edited = json.loads(json.dumps(state))
        edited["root"]["source"]["source"][key] = value
        fresh = Loader(make())
        fresh.load_state_dict(edited)
        with pytest.raises(ValueError, match="does not match the digest it was saved with"):
            next(iter(fresh))
    untouched = Loader(make())
    untouched.load_state_dict(json.loads(json.dumps(state)))
    assert len(list(untouched)) > 0


def test_a_state_refused_by_its_digest_leaves_no_thread_running(memory_url: Any) -> None:
    """The digest is checked after the nodes took up the state, so the fetch loop has
    started by then: the refusal stops it, and the loader (still referenced, as a caller
    that catches the error holds it) runs nothing until it is iterated again."""
    earlier = threads_left_by_earlier_tests()
    url, _ = memory_url()
    make = lambda: build_loader(url, split="all", batch_size=5, block_chunks=2).root  # noqa: E731
    saved = Loader(make())
    state = _state_after(saved, 3)
    saved.close()
    state["root"]["source"]["source"]["samples_yielded"] = 10
    fresh = Loader(make())
    fresh.load_state_dict(state)
    with pytest.raises(ValueError, match="does not match the digest it was saved with"):
        iter(fresh)
    # `fresh` is still referenced: nothing was collected
    assert [t for t in our_threads() if t not in earlier] == []
