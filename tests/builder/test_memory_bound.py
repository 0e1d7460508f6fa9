"""One memory budget bounds the window, the batch, reads in flight and read-ahead."""

from __future__ import annotations

import tracemalloc
from typing import Any

import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st

from insitubatch_nodes import AsyncFetchNode, build_loader
from insitubatch_nodes.core.geometry import VariableLayout
from insitubatch_nodes.core.memory_bound import (
    BLOCKS_PER_BUDGET,
    CACHE_QUEUE_BYTES,
    CACHE_QUEUE_SHARE,
    MIN_BLOCK_CHUNKS,
    MIN_BLOCK_SAMPLES,
    default_block_chunks,
    plan_memory,
)
from insitubatch_nodes.nodes.graph import graph_nodes
from insitubatch_nodes.nodes.read_planner import ReadPlanNode

LAYOUTS = {
    "a": VariableLayout((100, 8, 8), (5, 8, 8), "float32"),  # 256 B per sample
    "b": VariableLayout((100, 4), (10, 4), "int16"),  # 8 B per sample
}


def _least_budget(batch_size: int, block_samples: int, max_inflight: int) -> int:
    """What the fixed parts and one block read ahead take of a budget over `LAYOUTS`: the
    window, the batch and the block at 264 bytes a sample, a read in flight a chunk of `a`
    (1280 bytes)."""
    return (2 * batch_size + 3 * block_samples) * 264 + max_inflight * 5 * 64 * 4


@given(st.integers(1, 64), st.integers(1, 80), st.integers(1, 16), st.data())
def test_a_budget_below_the_least_is_refused_with_or_without_the_cache(
    batch_size: int, block_samples: int, max_inflight: int, data: st.DataObject
) -> None:
    """Refused exactly below the least budget (`_least_budget` itself fits), and a cache's
    write queue never makes a budget fit."""
    settings: dict[str, Any] = dict(
        batch_size=batch_size, block_samples=block_samples, max_inflight=max_inflight
    )
    least = _least_budget(batch_size, block_samples, max_inflight)
    plan_memory(least, LAYOUTS, **settings)
    budget = data.draw(st.integers(0, least - 1), label="budget")
    with pytest.raises(ValueError) as refused:
        plan_memory(budget, LAYOUTS, **settings)
    assert f"memory_budget={budget} bytes is too small" in str(refused.value)
    assert f"(at least {least} in all)" in str(refused.value)
    with pytest.raises(ValueError) as also:
        plan_memory(budget, LAYOUTS, **settings, cache_writes=True)
    assert str(also.value) == str(refused.value)


@given(st.integers(1, 64), st.integers(1, 80), st.integers(1, 16), st.integers(0, 1 << 20))
def test_the_parts_add_up_to_the_budget(
    batch_size: int, block_samples: int, max_inflight: int, spare: int
) -> None:
    budget = _least_budget(batch_size, block_samples, max_inflight) + spare
    plan = plan_memory(
        budget,
        LAYOUTS,
        batch_size=batch_size,
        block_samples=block_samples,
        max_inflight=max_inflight,
    )
    assert plan.block_bytes == block_samples * 264
    assert plan.window_bytes == (batch_size + 2 * block_samples) * 264
    assert plan.read_ahead_bytes >= plan.block_bytes
    parts = plan.window_bytes + plan.batch_bytes + plan.inflight_bytes + plan.read_ahead_bytes
    assert parts == budget


@given(st.integers(1, 64), st.integers(1, 80), st.integers(1, 16), st.integers(0, 1 << 28))
def test_the_cache_write_queue_takes_its_share_from_the_read_ahead_beyond_one_block(
    batch_size: int, block_samples: int, max_inflight: int, spare: int
) -> None:
    settings: dict[str, Any] = dict(
        batch_size=batch_size, block_samples=block_samples, max_inflight=max_inflight
    )
    budget = _least_budget(batch_size, block_samples, max_inflight) + spare
    without = plan_memory(budget, LAYOUTS, **settings)
    plan = plan_memory(budget, LAYOUTS, **settings, cache_writes=True)  # a budget that fits
    assert without.cache_queue_bytes == 0
    assert plan.cache_queue_bytes == min(
        CACHE_QUEUE_BYTES, budget // CACHE_QUEUE_SHARE, without.read_ahead_bytes - plan.block_bytes
    )
    assert plan.read_ahead_bytes == without.read_ahead_bytes - plan.cache_queue_bytes
    assert plan.read_ahead_bytes >= plan.block_bytes
    fixed = (plan.window_bytes, plan.batch_bytes, plan.inflight_bytes, plan.block_bytes)
    assert fixed == (
        without.window_bytes,
        without.batch_bytes,
        without.inflight_bytes,
        without.block_bytes,
    )
    parts = plan.window_bytes + plan.batch_bytes + plan.inflight_bytes + plan.read_ahead_bytes
    assert parts + plan.cache_queue_bytes == budget


def test_a_budget_below_one_block_is_refused_with_what_it_needs(memory_url: Any) -> None:
    url, _ = memory_url()
    with pytest.raises(ValueError, match=r"memory_budget=1000 bytes is too small.*block_chunks"):
        build_loader(url, split="all", batch_size=4, memory_budget=1000)


def test_peak_memory_of_an_epoch_stays_within_the_budget(tmp_path: Any) -> None:
    group = zarr.open_group(str(tmp_path / "m.zarr"), mode="w")
    for name in ("u", "v"):
        array = group.create_array(
            name, shape=(480, 64, 64), chunks=(4, 64, 64), dtype="float32", compressors=None
        )
        array[...] = np.random.default_rng(0).standard_normal(array.shape, dtype=np.float32)
    sample_bytes = 2 * 64 * 64 * 4  # 32 KiB: the epoch is 15 MiB
    budget = 8 << 20
    loader = build_loader(
        str(tmp_path / "m.zarr"),
        split="all",
        batch_size=8,
        block_chunks=2,
        max_inflight=64,  # pending reads alone would read ahead 8 MiB: the budget binds
        memory_budget=budget,
        device="cpu",
    )
    fetch = next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))
    assert fetch.memory_budget < budget  # the window, batch and reads took their share
    tracemalloc.start()
    try:
        samples = sum(len(batch["sample_index"]) for batch in loader)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert samples == 480 and samples * sample_bytes > budget + (4 << 20)
    assert peak <= budget + (1 << 20)  # plus interpreter noise (traced Python objects)


@given(
    unit_samples=st.integers(1, 500),
    unit_bytes=st.integers(1, 1 << 30),
    budget=st.integers(1 << 20, 1 << 36),
)
def test_default_blocks_reach_enough_samples_within_the_budget(
    unit_samples: int, unit_bytes: int, budget: int
) -> None:
    chunks = default_block_chunks(unit_samples, unit_bytes, budget)
    assert chunks >= MIN_BLOCK_CHUNKS
    if chunks > MIN_BLOCK_CHUNKS:  # grown past the floor: for samples, and only as affordable
        assert (chunks - 1) * unit_samples < MIN_BLOCK_SAMPLES
        assert chunks * unit_bytes * BLOCKS_PER_BUDGET <= budget
    elif (MIN_BLOCK_CHUNKS + 1) * unit_bytes * BLOCKS_PER_BUDGET <= budget:
        assert MIN_BLOCK_CHUNKS * unit_samples >= MIN_BLOCK_SAMPLES  # the floor was enough


@pytest.mark.parametrize(("steps_per_chunk", "expected"), [(1, 64), (4, 16), (8, 8), (24, 8)])
def test_the_builder_sizes_blocks_from_the_chunking(
    tmp_path: Any, steps_per_chunk: int, expected: int
) -> None:
    group = zarr.open_group(str(tmp_path / "store.zarr"), mode="w")
    array = group.create_array(
        "x", shape=(96, 4, 4), chunks=(steps_per_chunk, 4, 4), dtype="float32"
    )
    array[...] = 1.0
    loader = build_loader(str(tmp_path / "store.zarr"), split="all", device="cpu")
    plans = next(n for n in graph_nodes(loader.root) if isinstance(n, ReadPlanNode))
    assert plans.block_chunks == expected
    explicit = build_loader(str(tmp_path / "store.zarr"), split="all", block_chunks=3, device="cpu")
    plans = next(n for n in graph_nodes(explicit.root) if isinstance(n, ReadPlanNode))
    assert plans.block_chunks == 3
