"""The pool shuffle node: it yields `core.pool_order.pool_epoch_order` (ramping up or not,
interleaving batches or not), resumes exactly at every cut (through JSON), gives block
memory back unit by unit, refuses states of the block shuffle (and the block shuffle its
states) by name, resumes version 2's states without the interleave and version 1's
without a ramp either (refusing them, naming the settings, in a loader with them), and
refuses version 3's states in a loader without the interleave."""

from __future__ import annotations

import gc
import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from insitubatch_nodes import AnchorSet, Loader, SampleSpec, ZarrSource, build_loader, window
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.pool_order import POOL_ORDER_VERSION, pool_epoch_order
from insitubatch_nodes.io.host.host_resources import HostResources
from insitubatch_nodes.nodes.async_fetch import AsyncFetchNode
from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.pool_shuffle import PoolShuffleNode
from insitubatch_nodes.nodes.state_checks import CONFIG_KEY, ORDER_VERSION_KEY
from tests.helpers.batches import torch_roundtrip
from tests.helpers.graphs import build_stage
from tests.helpers.loader_settings import (
    dealt_anchors,
    draw_rank_and_batch,
)
from tests.helpers.profiles import loader_property
from tests.helpers.resume_check import check_every_cut, check_resumed_at


def _indices(loader: Loader[Any]) -> list[np.ndarray]:
    return [np.asarray(b["sample_index"]).copy() for b in loader]


@loader_property(30)
@given(
    num_samples=st.integers(5, 70),
    chunk_a=st.integers(1, 7),
    chunk_b=st.integers(1, 7),
    pool_size=st.integers(1, 8),
    pool_ramp=st.integers(0, 3),
    pool_interleave=st.booleans(),
    block_chunks=st.integers(1, 4),
    drop_last=st.booleans(),
    windowed=st.booleans(),
    data=st.data(),
)
def test_the_node_yields_the_pure_order_and_resumes_at_any_cut(
    memory_url: Any,
    num_samples: int,
    chunk_a: int,
    chunk_b: int,
    pool_size: int,
    pool_ramp: int,
    pool_interleave: bool,
    block_chunks: int,
    drop_last: bool,
    windowed: bool,
    data: st.DataObject,
) -> None:
    url, _ = memory_url(
        {
            "a": ((num_samples, 2), (chunk_a, 1), "float32"),
            "b": ((num_samples, 1), (chunk_b, 1), "int16"),
        }
    )
    spec = SampleSpec({"x": window(["a", "b"], steps=2)}) if windowed else None
    dealt = dealt_anchors(url, spec)
    world_size, rank, batch_size = draw_rank_and_batch(data, dealt, drop_last)

    def make() -> Any:
        return build_stage(
            url,
            "gather",
            rank=rank,
            world_size=world_size,
            block_chunks=block_chunks,
            batch_size=batch_size,
            drop_last=drop_last,
            spec=spec,
            pool_size=pool_size,
            pool_ramp=pool_ramp,
            pool_interleave=pool_interleave,
        )

    loader = Loader(make())
    epochs = [_indices(loader) for _ in range(2)]
    source = ZarrSource.open(url)
    anchors = AnchorSet.for_split(source.geometry, source.split_units("all"), spec)
    for epoch, batches in enumerate(epochs):
        a = assign_epoch(
            anchors, anchors.units, seed=0, epoch=epoch, rank=rank, world_size=world_size
        )
        want = pool_epoch_order(
            anchors,
            a,
            pool_size=pool_size,
            batch_size=batch_size,
            drop_last=drop_last,
            ramp=pool_ramp,
            interleave=pool_interleave,
        )
        assert np.array_equal(np.concatenate(batches), want)
        assert all(b.size == batch_size for b in batches[:-1])
    cut = data.draw(st.integers(0, len(epochs[0])))
    check_resumed_at(make, cut, epochs)


@pytest.mark.parametrize(
    ("world_size", "drop_last", "batch_size", "pool_size", "pool_ramp"),
    [
        (1, False, 5, 3, 1),
        (2, False, 9, 1, 0),
        (3, True, 4, 6, 1),
        (1, False, 1, 2, 2),
        (1, False, 3, 20, 1),
    ],
)
@pytest.mark.parametrize("pool_interleave", [True, False])
def test_every_cut_resumes_through_a_checkpoint(
    memory_url: Any,
    world_size: int,
    drop_last: bool,
    batch_size: int,
    pool_size: int,
    pool_ramp: int,
    pool_interleave: bool,
) -> None:
    url, _ = memory_url()
    for rank in range(world_size):
        check_every_cut(
            lambda rank=rank: build_stage(
                url,
                "device",
                rank=rank,
                world_size=world_size,
                batch_size=batch_size,
                drop_last=drop_last,
                pool_size=pool_size,
                pool_ramp=pool_ramp,
                pool_interleave=pool_interleave,
            )
        )


def test_the_state_is_small_and_plain(memory_url: Any) -> None:
    url, _ = memory_url()
    loader = Loader(build_stage(url, "shuffle", batch_size=5, pool_size=4))
    iterator = iter(loader)
    for _ in range(3):
        next(iterator)
    state = loader.state_dict()["root"]
    assert json.loads(json.dumps(state)) == state
    assert len(state["resident"]) <= 4 + 5  # O(P) pairs of ints
    assert all(type(v) is int for pair in state["resident"] for v in pair)
    assert state[CONFIG_KEY]["order"] == "pool" and state[CONFIG_KEY]["pool_size"] == 4
    assert state[CONFIG_KEY]["pool_interleave"] is True
    assert state[CONFIG_KEY][ORDER_VERSION_KEY] == POOL_ORDER_VERSION == 3


def test_units_give_their_memory_back_as_they_drain(memory_url: Any) -> None:
    """With blocks of 8 units and a pool of 3, holding whole blocks until their last unit
    drained would hold most of the store; unit by unit, the slots stay near the pool's."""
    url, _ = memory_url({"a": ((400, 64), (2, 64), "float32")})  # 200 units of 512 B
    root = build_stage(url, "gather", batch_size=4, block_chunks=8, pool_size=3)
    fetch = next(n for n in graph_nodes(root) if isinstance(n, AsyncFetchNode))
    slots = fetch.context.block_slots
    unit_bytes = 2 * 64 * 4
    most = 0
    for _ in Loader(root):
        most = max(most, slots.leased_bytes)
    # the pool, the block whose units wait, and the blocks read ahead (2 by default)
    assert most <= (3 + 8 * 3 + 4) * unit_bytes
    assert slots.blocks_outside == 0
    gc.collect()
    assert slots.leased_bytes == 0


def test_a_state_of_one_order_is_refused_by_the_other(memory_url: Any) -> None:
    url, _ = memory_url()

    def state_of(shuffle: str) -> Any:
        loader = build_loader(url, split="all", batch_size=5, shuffle=shuffle, max_inflight=2)
        iterator = iter(loader)
        next(iterator)
        return torch_roundtrip(loader.state_dict())

    pool_state, block_state = state_of("pool"), state_of("block")
    block = build_loader(url, split="all", batch_size=5, shuffle="block", max_inflight=2)
    block.load_state_dict(pool_state)
    with pytest.raises(ValueError, match=r"made by the 'pool' shuffle.*shuffle='pool'"):
        next(iter(block))
    pool = build_loader(url, split="all", batch_size=5, shuffle="pool", max_inflight=2)
    pool.load_state_dict(block_state)
    with pytest.raises(ValueError, match=r"made by the 'block' shuffle.*shuffle='block'"):
        next(iter(pool))
    part = pool_state["root"]
    while part.get("node") != "PoolShuffleNode":
        part = part["source"]
    part[CONFIG_KEY][ORDER_VERSION_KEY] = 0
    pool_state.pop("digest", None)
    pool = build_loader(url, split="all", batch_size=5, shuffle="pool", max_inflight=2)
    pool.load_state_dict(pool_state)
    with pytest.raises(ValueError, match="version 0 of the 'pool' shuffle"):
        next(iter(pool))


def _pool_part(state: dict[str, Any]) -> dict[str, Any]:
    part = state["root"]
    while part.get("node") != "PoolShuffleNode":
        part = part["source"]
    return part


def _resumed(make: Any, state: dict[str, Any], **settings: Any) -> list[np.ndarray]:
    """The batches' sample ids of a loader built with `settings` and resumed from `state`."""
    resumed = make(**settings)
    resumed.load_state_dict(state)
    return _indices(resumed)


def _older_state(
    memory_url: Any, version: int, **settings: Any
) -> tuple[Loader[Any], dict[str, Any], list[np.ndarray]]:
    """A maker of loaders of `settings`, a state saved by one after 3 batches and rewritten
    as version `version` wrote it (no `pool_interleave`, and for version 1 no `pool_ramp`),
    and the batches that followed the cut."""
    url, _ = memory_url()

    def make(**more: Any) -> Loader[Any]:
        return build_loader(url, split="all", batch_size=5, max_inflight=2, device="cpu", **more)

    saver = make(**settings)
    iterator = iter(saver)
    for _ in range(3):
        next(iterator)
    state = torch_roundtrip(saver.state_dict())
    rest = [np.asarray(b["sample_index"]).copy() for b in iterator]
    config = _pool_part(state)[CONFIG_KEY]
    assert config.pop("pool_interleave") is False and config[ORDER_VERSION_KEY] == 2
    if version == 1:
        assert config.pop("pool_ramp") == 0
    config[ORDER_VERSION_KEY] = version  # what that version wrote
    state.pop("digest", None)
    return make, state, rest


def test_a_version_1_state_resumes_without_a_ramp_nor_interleave_and_is_refused_else(
    memory_url: Any,
) -> None:
    """A state saved before the ramp says version 1 and has no `pool_ramp`: a loader with
    `pool_ramp=0, pool_interleave=False` draws that order and resumes it exactly; the
    default loader, or one with a ramp, would draw other batches, and names the settings
    instead."""
    make, state, rest = _older_state(memory_url, 1, pool_ramp=0, pool_interleave=False)
    got = _resumed(make, state, pool_ramp=0, pool_interleave=False)
    assert len(got) == len(rest)
    assert all(np.array_equal(x, y) for x, y in zip(got, rest, strict=True))
    default = make()
    default.load_state_dict(state)
    both = r"version 1 of the 'pool'.*with pool_interleave=False, pool_ramp=0 to resume"
    with pytest.raises(ValueError, match=both):
        next(iter(default))
    ramped = make(pool_interleave=False)
    ramped.load_state_dict(state)
    with pytest.raises(ValueError, match=r"version 1 of the 'pool'.*with pool_ramp=0 to resume"):
        next(iter(ramped))


def test_a_version_2_state_resumes_without_the_interleave_and_is_refused_with_it(
    memory_url: Any,
) -> None:
    """A state saved before the interleave says version 2 and has no `pool_interleave`: a
    loader with `pool_interleave=False` draws that order and resumes it exactly; the
    default loader would draw other batches, and names the setting instead."""
    make, state, rest = _older_state(memory_url, 2, pool_interleave=False)
    got = _resumed(make, state, pool_interleave=False)
    assert len(got) == len(rest)
    assert all(np.array_equal(x, y) for x, y in zip(got, rest, strict=True))
    default = make()
    default.load_state_dict(state)
    with pytest.raises(
        ValueError, match=r"version 2 of the 'pool'.*with pool_interleave=False to resume"
    ):
        next(iter(default))


def test_a_version_3_state_is_refused_without_the_interleave(memory_url: Any) -> None:
    url, _ = memory_url()
    saver = build_loader(url, split="all", batch_size=5, max_inflight=2, device="cpu")
    iterator = iter(saver)
    next(iterator)
    state = torch_roundtrip(saver.state_dict())
    grouped = build_loader(
        url, split="all", batch_size=5, max_inflight=2, device="cpu", pool_interleave=False
    )
    grouped.load_state_dict(state)
    with pytest.raises(
        ValueError, match=r"version 3 of the 'pool'.*with pool_interleave=True to resume"
    ):
        next(iter(grouped))


def test_a_state_of_another_ramp_is_refused_by_name(memory_url: Any) -> None:
    url, _ = memory_url()
    saver = build_loader(url, split="all", batch_size=5, max_inflight=2, pool_ramp=1)
    iterator = iter(saver)
    next(iterator)
    state = torch_roundtrip(saver.state_dict())
    loader = build_loader(url, split="all", batch_size=5, max_inflight=2)
    loader.load_state_dict(state)
    with pytest.raises(ValueError, match="saved with pool_ramp=1 but this graph has pool_ramp=2"):
        next(iter(loader))


@pytest.mark.parametrize("order", [{}, {"shuffle": "block"}, {"evaluation": True}])
@pytest.mark.parametrize("ramp", [-1, True, 1.5])
def test_a_bad_pool_ramp_is_refused_whatever_the_order(
    memory_url: Any, order: dict[str, Any], ramp: Any
) -> None:
    """A ramp the pool would refuse is refused by every loader, not only where the pool
    runs: a typo in a config should not pass silently until the shuffle is switched."""
    url, _ = memory_url()
    with pytest.raises((ValueError, TypeError), match="pool_ramp"):
        build_loader(url, split="all", batch_size=5, device="cpu", pool_ramp=ramp, **order)


@pytest.mark.parametrize("order", [{}, {"shuffle": "block"}, {"evaluation": True}])
@pytest.mark.parametrize("interleave", [1, "yes", None])
def test_a_bad_pool_interleave_is_refused_whatever_the_order(
    memory_url: Any, order: dict[str, Any], interleave: Any
) -> None:
    url, _ = memory_url()
    with pytest.raises((ValueError, TypeError), match="pool_interleave"):
        build_loader(
            url, split="all", batch_size=5, device="cpu", pool_interleave=interleave, **order
        )


def test_the_first_batch_reads_its_own_units_only(memory_url: Any) -> None:
    """With a pool of 20 units of 2 samples and batches of 3, version 1 read 20 units
    before the first batch; the ramp enters 2 (its 3 samples), and before batch b as many
    as leave (b + 1) * 3 samples in the pool after the 3 * b drawn: ceil((2b + 1) * 1.5)."""
    url, _ = memory_url({"a": ((80, 2), (2, 2), "float32")})

    def entered(pool_ramp: int, batches: int) -> int:
        stage = build_stage(url, "shuffle", batch_size=3, pool_size=20, pool_ramp=pool_ramp)
        loader = Loader(stage)
        iterator = iter(loader)
        for _ in range(batches):
            next(iterator)
        return int(loader.state_dict()["root"]["next_unit"])

    assert entered(0, 1) == 20
    assert [entered(1, b) for b in (1, 2, 3)] == [2, 5, 8]


def test_bad_shuffle_names_the_choices(memory_url: Any) -> None:
    url, _ = memory_url()
    with pytest.raises(ValueError, match=r"shuffle must be 'pool'.*or 'block'"):
        build_loader(url, split="all", shuffle="global")


def test_evaluation_draws_in_order_whatever_the_shuffle(memory_url: Any) -> None:
    url, _ = memory_url()
    loader = build_loader(url, split="all", batch_size=7, evaluation=True, shuffle="pool")
    order = np.concatenate(_indices(loader))
    assert np.array_equal(order, np.arange(order.size))


def test_block_memory_stays_between_epochs_and_goes_on_close(memory_url: Any) -> None:
    """A pool's window is re-faulted in if its memory is let go at every epoch's end (a
    tenth of its throughput): the pages stay for the next epoch, and go on close()."""
    url, _ = memory_url({"a": ((400, 64), (2, 64), "float32")})
    loader = Loader(build_stage(url, "gather", batch_size=4, block_chunks=8, pool_size=3))
    fetch = next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))
    slots = fetch.context.block_slots
    for _ in loader:
        pass
    kept = slots.allocated_bytes
    assert kept > 0
    for _ in loader:
        pass
    assert slots.allocated_bytes == kept  # the same arrays, not new ones
    loader.close()
    assert slots.allocated_bytes == 0


def _pool_size(loader: Loader[Any]) -> int:
    return next(n for n in graph_nodes(loader.root) if isinstance(n, PoolShuffleNode)).pool_size


def test_the_default_window_shrinks_to_fit_a_small_budget_given(memory_url: Any) -> None:
    """Half of a 20 kB budget as the window left no room for a block read ahead, and the
    default loader was refused where the block shuffle's fitted; the window now holds
    the most units the budget has room for, and the loader stays within the budget."""
    url, _ = memory_url({"a": ((400, 64), (2, 64), "float32")})  # 200 units of 512 B
    args = {"split": "all", "batch_size": 4, "memory_budget": 20_000, "device": "cpu"}
    loader = build_loader(url, **args)
    assert 3 <= _pool_size(loader) < 20_000 // 2 // 512
    fetch = next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))
    assert sum(len(b["sample_index"]) for b in loader) == 400
    assert fetch.context.block_slots.peak_leased_bytes <= 20_000
    # a budget given is a setting: the same on every host, so the same pool
    assert _pool_size(build_loader(url, **args)) == _pool_size(loader)
    # a window given is kept, and a budget it does not fit in is refused with the numbers
    with pytest.raises(ValueError, match="memory_budget=20000 bytes is too small"):
        build_loader(url, shuffle_window=10_000, **args)


def test_a_budget_from_the_host_never_changes_the_pool(memory_url: Any) -> None:
    url, _ = memory_url({"a": ((400, 64), (2, 64), "float32")})
    sizes = {
        _pool_size(build_loader(url, split="all", batch_size=4, device="cpu", host=host))
        for host in (
            HostResources(memory_bytes=6 << 20, cores=1),
            HostResources(memory_bytes=512 << 30, cores=64, local_ranks=8),
        )
    }
    assert len(sizes) == 1
