"""The links between a graph's nodes (`nodes.links`): handed to a node's constructor, or
resolved once by the `Loader` for a graph composed by hand (`loader.graph_links`), and
refused when they cannot be told apart."""

from __future__ import annotations

import time
from typing import Any

import pytest
from torchdata.nodes import BaseNode, Mapper

from insitubatch_nodes import (
    AsyncFetchNode,
    ChunkPermuteNode,
    GatherNode,
    Loader,
    PinToDeviceNode,
    PoolShuffleNode,
    ReadPlanNode,
    ShuffleBlockNode,
    ZarrSource,
)
from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY
from insitubatch_nodes.core.drained_units import DrainedUnits
from tests.helpers.threads import our_threads, threads_left_by_earlier_tests


class _Pair(BaseNode[Any]):
    """Holds two graphs as public attributes, as a node composed by hand could (it is only
    built here, never iterated)."""

    def __init__(self, first: BaseNode[Any], second: BaseNode[Any]) -> None:
        super().__init__()
        self.first = first
        self.second = second

    def next(self) -> Any:
        raise StopIteration

    def get_state(self) -> dict[str, Any]:
        return {}


class _TellingPlanner(ReadPlanNode):
    """A planner that records what it is told to leave out."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.told: list[DrainedUnits | None] = []

    def leave_out_drained(self, drained: DrainedUnits | None) -> None:
        self.told.append(drained)
        super().leave_out_drained(drained)


def _by_hand(
    url: str,
    *,
    pool: bool = False,
    mapped: bool = False,
    planner: type = ReadPlanNode,
    **links: Any,
) -> dict[str, Any]:
    """The README's graph composed by hand, given the `links` only (`mapped`: with a
    torchdata `Mapper` after the gather, as the README's second graph): every node, by
    stage."""
    source = ZarrSource.open(url)
    units = ChunkPermuteNode(source.geometry, source.split_units("all"), seed=0)
    plans = planner(units, source.geometry, block_chunks=2)
    blocks = AsyncFetchNode(plans, source.read_context(max_inflight=2))
    if pool:
        draws: BaseNode[Any] = PoolShuffleNode(blocks, pool_size=4, batch_size=5, **links)
    else:
        draws = ShuffleBlockNode(blocks, batch_size=5, **links)
    gathered: BaseNode[Any] = GatherNode(draws)
    if mapped:
        gathered = Mapper(gathered, lambda batch: batch)
    device = PinToDeviceNode(gathered, device="cpu")
    return {"units": units, "plans": plans, "blocks": blocks, "draws": draws, "root": device}


def _ids(batches: Any) -> list[list[int]]:
    return [batch[SAMPLE_INDEX_KEY].tolist() for batch in batches]


def _stopped(earlier: set[Any], timeout: float = 5.0) -> bool:
    """Whether every library thread started since `earlier` was taken has ended."""
    deadline = time.monotonic() + timeout
    while set(our_threads()) - earlier and time.monotonic() < deadline:
        time.sleep(0.01)
    return not set(our_threads()) - earlier


@pytest.mark.parametrize(("pool", "mapped"), [(False, False), (True, False), (False, True)])
def test_a_graph_composed_by_hand_gets_its_links_when_the_loader_is_built(
    memory_url: Any, pool: bool, mapped: bool
) -> None:
    url, _ = memory_url()
    earlier = threads_left_by_earlier_tests()
    graph = _by_hand(url, pool=pool, mapped=mapped)
    draws = graph["draws"]
    assert draws.epoch_keeper is None
    with pytest.raises(TypeError, match=r"no epoch keeper .* epoch_keeper=\.\.\."):
        draws.batches_per_epoch()
    loader = Loader(graph["root"])
    assert draws.epoch_keeper is graph["units"]
    if pool:
        assert draws.block_planner is graph["plans"]
    epoch = _ids(loader)
    assert len(loader) == len(epoch) == 18  # 88 samples, batches of 5
    stats = loader.stats()
    assert stats["batches"] == 18 and stats["samples"] == 88 and stats["gather_s"] > 0
    loader.set_epoch(0)  # epoch 0 again, not the next one
    assert _ids(loader) == epoch
    loader.sampler.set_epoch(3)
    third = _ids(loader)
    assert sorted(i for b in third for i in b) == list(range(88)) and third != epoch
    iterator = iter(loader)
    next(iterator)
    assert set(our_threads()) - earlier  # mid-epoch: the fetch loop runs
    loader.close()
    assert _stopped(earlier)


def test_a_pool_composed_by_hand_tells_the_planner_the_loader_linked_on_resume(
    memory_url: Any,
) -> None:
    url, _ = memory_url()
    whole = _ids(Loader(_by_hand(url, pool=True)["root"]))
    loader = Loader(_by_hand(url, pool=True)["root"])
    iterator = iter(loader)
    for _ in range(9):
        next(iterator)
    state = loader.state_dict()
    loader.close()
    graph = _by_hand(url, pool=True, planner=_TellingPlanner)
    fresh = Loader(graph["root"])
    fresh.load_state_dict(state)
    assert _ids(fresh) == whole[9:]
    assert any(told is not None for told in graph["plans"].told)  # drained units left out


def test_a_node_given_its_peer_needs_no_loader(memory_url: Any) -> None:
    url, _ = memory_url()
    source = ZarrSource.open(url)
    units = ChunkPermuteNode(source.geometry, source.split_units("all"), seed=0)
    blocks = AsyncFetchNode(
        ReadPlanNode(units, source.geometry, block_chunks=2), source.read_context()
    )
    draws = ShuffleBlockNode(blocks, batch_size=5, epoch_keeper=units)
    assert draws.batches_per_epoch() == 18
    draws.reset()
    assert sum(1 for _ in draws) == 18
    blocks.close()


def test_a_peer_that_does_not_offer_the_link_is_refused_where_it_is_handed(
    memory_url: Any,
) -> None:
    url, _ = memory_url()
    source = ZarrSource.open(url)
    units = ChunkPermuteNode(source.geometry, source.split_units("all"), seed=0)
    plans = ReadPlanNode(units, source.geometry, block_chunks=2)
    blocks = AsyncFetchNode(plans, source.read_context())
    with pytest.raises(TypeError, match=r"epoch_keeper must be a node that offers EpochKeeper"):
        ShuffleBlockNode(blocks, batch_size=5, epoch_keeper=plans)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"block_planner must be a node that offers BlockPlanner"):
        PoolShuffleNode(blocks, pool_size=2, batch_size=5, block_planner=units)  # type: ignore[arg-type]


def test_a_link_given_to_the_constructor_is_kept_by_the_loader(memory_url: Any) -> None:
    url, _ = memory_url()
    own = ChunkPermuteNode(ZarrSource.open(url).geometry, [0, 1], seed=0)  # 2 units' samples
    graph = _by_hand(url, epoch_keeper=own)
    loader = Loader(graph["root"])
    assert graph["draws"].epoch_keeper is own
    assert len(loader) == -(-own.samples_per_epoch(5, False) // 5) < 18


def test_a_graph_with_two_epoch_keepers_is_refused_when_the_loader_is_built(
    memory_url: Any,
) -> None:
    url, _ = memory_url()
    pair = _Pair(_by_hand(url)["root"], _by_hand(url)["root"])
    with pytest.raises(ValueError) as refused:
        Loader(pair)
    assert str(refused.value) == (
        "this Loader's graph has 2 nodes that deal epochs (ChunkPermuteNode, "
        "ChunkPermuteNode), where set_epoch and a resume need the one to deal them: build "
        "one Loader for each pipeline"
    )


def test_a_graph_with_two_shuffle_nodes_is_refused_when_the_loader_is_built(
    memory_url: Any,
) -> None:
    url, _ = memory_url()
    blocks = _by_hand(url)["blocks"]
    pair = _Pair(
        ShuffleBlockNode(blocks, batch_size=4), PoolShuffleNode(blocks, pool_size=2, batch_size=4)
    )
    with pytest.raises(ValueError) as refused:
        Loader(pair)
    assert str(refused.value) == (
        "this Loader's graph has 2 nodes that count an epoch's batches (PoolShuffleNode, "
        "ShuffleBlockNode), where len() says the one count: build one Loader for each "
        "pipeline"
    )


def test_a_pool_with_two_planners_upstream_is_refused_unless_given_one(memory_url: Any) -> None:
    url, _ = memory_url()
    source = ZarrSource.open(url)
    units = ChunkPermuteNode(source.geometry, source.split_units("all"), seed=0)
    first = ReadPlanNode(units, source.geometry, block_chunks=2)
    second = ReadPlanNode(units, source.geometry, block_chunks=4)
    two = _Pair(first, second)
    with pytest.raises(ValueError) as refused:
        Loader(PoolShuffleNode(two, pool_size=2, batch_size=4))  # type: ignore[arg-type]
    assert str(refused.value) == (
        "the PoolShuffleNode has 2 nodes upstream that plan blocks (ReadPlanNode, "
        "ReadPlanNode), and tells one which units a resume leaves out: pass it as "
        "PoolShuffleNode(..., block_planner=...)"
    )
    pool = PoolShuffleNode(two, pool_size=2, batch_size=4, block_planner=second)  # type: ignore[arg-type]
    Loader(pool)
    assert pool.block_planner is second and pool.epoch_keeper is units
