"""A resumed pool shuffle reads only the units it still needs (issue 17): the resident
units, those not entered yet and, when the rank pads, its epoch's last unit; never a unit
drained before the state was saved, even when it shares a block with one still needed.
Reads are counted as the chunk keys a real zarr store underneath is asked for."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

from insitubatch_nodes import (
    AnchorSet,
    Loader,
    SampleGeometry,
    SampleSpec,
    ZarrSource,
    build_loader,
    window,
)
from insitubatch_nodes import memory_store as named_memory_store
from insitubatch_nodes.core.batch_fields import SAMPLE_INDEX_KEY
from insitubatch_nodes.core.drained_units import DrainedUnits
from insitubatch_nodes.core.partition import EpochAssignment, assign_epoch
from insitubatch_nodes.loader.rank_states import RANK_STATES_KEY
from insitubatch_nodes.nodes.chunk_permute import ChunkPermuteNode
from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.read_planner import ReadPlanNode
from tests.helpers.graphs import build_stage
from tests.helpers.loader_settings import (
    dealt_anchors,
    draw_rank_and_batch,
)
from tests.helpers.profiles import loader_property
from tests.helpers.resume_check import cut_and_resume


class ChunkKeyRecorder(WrapperStore[Store]):
    """Keeps the key of every chunk `get` (a real store underneath)."""

    def __init__(self, store: Store) -> None:
        super().__init__(store)
        self.chunks: list[str] = []

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if "/c/" in f"/{key}":
            self.chunks.append(key)
        return await self._store.get(key, prototype, byte_range)


def recorder(url: str) -> ChunkKeyRecorder:
    return ChunkKeyRecorder(named_memory_store(url.removeprefix("memory://")))


def pool_part(state: dict[str, Any]) -> dict[str, Any]:
    part = state["root"]
    while part.get("node") != "PoolShuffleNode":
        part = part["source"]
    return part


def kept_positions(state: dict[str, Any], a: EpochAssignment) -> np.ndarray:
    """The positions of the rank's epoch a resume from `state` still needs: resident,
    not entered yet, and the last one when the rank pads (it pads from that unit)."""
    pool = pool_part(state)
    kept = {p for p, _ in pool["resident"]} | set(range(pool["next_unit"], a.units.size))
    if pool["samples_this_epoch"] is not None and pool["samples_this_epoch"] > a.rank_samples:
        kept.add(a.units.size - 1)
    return np.array(sorted(kept), dtype=np.int64)


def needed_chunks(
    anchors: AnchorSet, spec: SampleSpec | None, units: np.ndarray
) -> set[tuple[str, int]]:
    """(variable, sample-axis chunk) of every step the samples of `units` read, windows
    included."""
    steps = anchors.unit_samples(units) // anchors.samples_per_anchor
    layouts = anchors.geometry.variables
    offsets = {n: (0,) for n in layouts} if spec is None else spec.variable_offsets()
    needed = set()
    for name, wanted in offsets.items():
        touched = (steps[:, None] + np.asarray(wanted)[None, :]) // layouts[name].sample_chunk
        needed |= {(name, int(c)) for c in np.unique(touched)}
    return needed


def read_chunks(keys: list[str]) -> set[tuple[str, int]]:
    """(variable, sample-axis chunk) of recorded chunk keys (`name/c/i/...`)."""
    return {(key.split("/c/")[0], int(key.split("/c/")[1].split("/")[0])) for key in keys}


def drained_chunks(
    anchors: AnchorSet, spec: SampleSpec | None, state: dict[str, Any], a: EpochAssignment
) -> set[tuple[str, int]]:
    """Chunks only drained units of the cut epoch read (those no kept unit reads)."""
    kept = kept_positions(state, a)
    drained = np.setdiff1d(np.arange(pool_part(state)["next_unit"]), kept)
    return needed_chunks(anchors, spec, a.units[drained]) - needed_chunks(
        anchors, spec, a.units[kept]
    )


def split_anchors(url: str, spec: SampleSpec | None, unit_length: int | None = None) -> AnchorSet:
    """The anchors `build_stage` deals (on a grid of `unit_length` steps, if given)."""
    source = ZarrSource.open(url)
    if unit_length is None:
        return AnchorSet.for_split(source.geometry, source.split_units("all"), spec)
    grid = SampleGeometry(source.geometry.variables, unit_length)
    return AnchorSet.for_steps(grid, source.step_ranges("all"), spec)


def permute_assignment(root: Any) -> EpochAssignment:
    node = next(n for n in graph_nodes(root) if isinstance(n, ChunkPermuteNode))
    return node.assignment


def test_a_resume_mid_epoch_reads_the_kept_units_chunks_once_and_nothing_else(
    memory_url: Any,
) -> None:
    """60 units of one chunk each, blocks of 4, a pool of 8: cut after 20 batches, the
    resident units lie among drained ones in the blocks a resume must read."""
    url, _ = memory_url({"a": ((120, 3), (2, 3), "float32")})
    store = recorder(url)

    def make() -> Any:
        return build_stage(store, "gather", batch_size=4, block_chunks=4, pool_size=8)

    rest = [batch[SAMPLE_INDEX_KEY].copy() for batch in Loader(make())][20:]
    state, got, fresh = cut_and_resume(make, 20, store.chunks.clear)
    a = permute_assignment(fresh.root)  # the epoch resumed
    anchors = split_anchors(url, None)
    assert len(got) == len(rest)
    assert all(np.array_equal(x, y) for x, y in zip(got, rest, strict=True))
    kept = kept_positions(state, a)
    drained = pool_part(state)["next_unit"] - int((kept < pool_part(state)["next_unit"]).sum())
    assert drained > 0 and drained_chunks(anchors, None, state, a)
    assert read_chunks(store.chunks) == needed_chunks(anchors, None, a.units[kept])
    assert len(store.chunks) == len(set(store.chunks))  # each once


@loader_property(30)
@given(
    num_samples=st.integers(5, 70),
    chunk_a=st.integers(1, 7),
    chunk_b=st.integers(1, 7),
    pool_size=st.integers(1, 8),
    pool_ramp=st.integers(0, 3),
    block_chunks=st.integers(1, 4),
    drop_last=st.booleans(),
    windowed=st.booleans(),
    data=st.data(),
)
def test_no_drained_unit_is_read_after_a_resume_at_any_cut(
    memory_url: Any,
    num_samples: int,
    chunk_a: int,
    chunk_b: int,
    pool_size: int,
    pool_ramp: int,
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
    store = recorder(url)

    def make() -> Any:
        return build_stage(
            store,
            "gather",
            rank=rank,
            world_size=world_size,
            block_chunks=block_chunks,
            batch_size=batch_size,
            drop_last=drop_last,
            spec=spec,
            pool_size=pool_size,
            pool_ramp=pool_ramp,
        )

    epoch = [batch[SAMPLE_INDEX_KEY].copy() for batch in Loader(make())]
    cut = data.draw(st.integers(0, len(epoch) - 1))
    state, got, fresh = cut_and_resume(make, cut, store.chunks.clear)
    a = permute_assignment(fresh.root)  # the epoch resumed
    anchors = split_anchors(url, spec)
    assert len(got) == len(epoch) - cut
    assert all(np.array_equal(x, y) for x, y in zip(got, epoch[cut:], strict=True))
    read = read_chunks(store.chunks)
    assert read <= needed_chunks(anchors, spec, a.units[kept_positions(state, a)])
    assert not read & drained_chunks(anchors, spec, state, a)


def test_a_resized_epoch_resumed_again_reads_no_drained_unit(memory_url: Any) -> None:
    """The rest of an epoch re-dealt to 3 ranks from 2 (`core.elastic`), cut again and
    resumed on 3: each rank reads only what its share still needs."""
    url, _ = memory_url({"a": ((96, 3), (2, 3), "float32"), "b": ((96,), (4,), "int16")})
    store = recorder(url)

    def group(world: int) -> list[Any]:
        return [
            build_loader(
                store,
                split="all",
                batch_size=3,
                block_chunks=4,
                rank=r,
                world_size=world,
                seed=3,
                device="cpu",
                max_inflight=2,
                shuffle_window=400,
            )
            for r in range(world)
        ]

    def cut_all(loaders: list[Any], batches: int) -> dict[str, Any]:
        for loader in loaders:
            iterator = iter(loader)
            for _ in range(batches):
                next(iterator)
        state = {RANK_STATES_KEY: [loader.state_dict() for loader in loaders]}
        for loader in loaders:
            loader.close()
        return json.loads(json.dumps(state))

    first = cut_all(group(2), 3)
    resized = group(3)
    for loader in resized:
        loader.load_state_dict(first)
    second = cut_all(resized, 4)
    for loader in group(3):
        loader.load_state_dict(second)
        store.chunks.clear()
        list(loader)
        loader.close()
        a = permute_assignment(loader.root)  # the epoch resumed
        assert a.starts is not None  # a re-dealt rest
        state = second[RANK_STATES_KEY][a.rank]
        anchors = split_anchors(url, None)
        read = read_chunks(store.chunks)
        assert read <= needed_chunks(anchors, None, a.units[kept_positions(state, a)])
        assert not read & drained_chunks(anchors, None, state, a)


@pytest.mark.parametrize("windowed", [False, True])
def test_on_a_grid_the_chunks_do_not_align_with_no_drained_unit_is_read(
    memory_url: Any, windowed: bool
) -> None:
    """Units of 2 steps on chunks of 3 (a fine grid): a chunk straddling a drained unit and
    a kept one is read for the kept one's rows only, and a chunk of drained units alone is
    never read."""
    url, _ = memory_url({"a": ((90, 2), (3, 2), "float32")})
    spec = SampleSpec({"x": window(["a"], steps=2)}) if windowed else None
    store = recorder(url)

    def make() -> Any:
        return build_stage(
            store, "gather", batch_size=4, block_chunks=3, pool_size=6, spec=spec, unit_length=2
        )

    whole = [batch[SAMPLE_INDEX_KEY].copy() for batch in Loader(make())]
    state, got, fresh = cut_and_resume(make, 12, store.chunks.clear)
    assert all(np.array_equal(x, y) for x, y in zip(got, whole[12:], strict=True))
    assert len(got) == len(whole) - 12
    a = permute_assignment(fresh.root)
    anchors = split_anchors(url, spec, unit_length=2)
    read = read_chunks(store.chunks)
    only_drained = drained_chunks(anchors, spec, state, a)
    assert only_drained and not read & only_drained
    assert read <= needed_chunks(anchors, spec, a.units[kept_positions(state, a)])


@pytest.mark.parametrize("block_chunks", [1, 4])
def test_a_state_saved_after_a_resume_resumes_exactly(memory_url: Any, block_chunks: int) -> None:
    """Blocks planned without their drained units say where a later resume starts as
    before: cut, resume, cut again, resume again, and the batches are the uninterrupted
    run's."""
    url, _ = memory_url({"a": ((120, 3), (2, 3), "float32")})

    def make() -> Loader[Any]:
        return Loader(
            build_stage(url, "gather", batch_size=4, block_chunks=block_chunks, pool_size=8)
        )

    whole = [batch[SAMPLE_INDEX_KEY].copy() for batch in make()]
    state = None
    for cut in (12, 5):  # from the start, then from the first resume
        loader = make()
        if state is not None:
            loader.load_state_dict(state)
        iterator = iter(loader)
        for _ in range(cut):
            next(iterator)
        state = json.loads(json.dumps(loader.state_dict()))
    last = make()
    last.load_state_dict(state)
    got = [batch[SAMPLE_INDEX_KEY] for batch in last]
    assert len(got) == len(whole) - 17
    assert all(np.array_equal(x, y) for x, y in zip(got, whole[17:], strict=True))


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
    state, got, _ = cut_and_resume(make, 2)
    pool = pool_part(state)
    assert pool["next_unit"] == 4 and pool["samples_this_epoch"] == 12
    assert len(got) == 1 and np.array_equal(got[0], whole[2])


def test_drained_units_are_the_positions_below_next_unit_not_resident_nor_padded_from(
    memory_url: Any,
) -> None:
    url, _ = memory_url({"a": ((40, 2), (2, 2), "float32")})
    anchors = split_anchors(url, None)
    a = assign_epoch(anchors, anchors.units, seed=1, epoch=0, rank=0, world_size=1)
    positions = np.arange(a.units.size)
    no_pad = DrainedUnits.of(9, [2, 7, 3], a.rank_samples)
    want = [p < 9 and p not in (2, 3, 7) for p in range(a.units.size)]
    assert no_pad.drained(a, positions).tolist() == want
    everything = DrainedUnits.of(a.units.size, [], a.rank_samples)
    assert everything.drained(a, positions).all()
    pads = DrainedUnits.of(a.units.size, [], a.rank_samples + 1)
    assert pads.drained(a, positions).tolist() == [True] * (a.units.size - 1) + [False]


def test_the_planner_leaves_drained_units_and_wholly_drained_blocks_out(
    memory_url: Any,
) -> None:
    """Blocks of 4 keep their boundaries and indices; a block of drained units only is not
    planned; the plans' buffers hold the kept units' rows alone (what their memory is
    leased for); a new epoch plans everything."""
    url, _ = memory_url({"a": ((40, 2), (2, 2), "float32")})  # 20 units of 2 samples
    anchors = split_anchors(url, None)
    permute = ChunkPermuteNode(anchors, anchors.units, seed=1)
    planner = ReadPlanNode(permute, anchors, block_chunks=4)
    planner.reset(None)
    a = permute.assignment
    planner.leave_out_drained(DrainedUnits.of(10, [1, 9], a.rank_samples))
    plans = list(planner)
    assert [p.block_index for p in plans] == [0, 2, 3, 4]  # block 1: positions 4-7, drained
    kept = [1, 9, *range(10, 20)]
    assert np.concatenate([p.units for p in plans]).tolist() == a.units[kept].tolist()
    assert [p.buffer_rows["a"] for p in plans] == [2 * p.units.size for p in plans]
    planner.reset(None)  # the next epoch
    assert sum(p.units.size for p in planner) == 20
    planner.reset(None)
    next(planner)
    with pytest.raises(RuntimeError, match="before the first block is planned"):
        planner.leave_out_drained(DrainedUnits.of(4, [], 40))
