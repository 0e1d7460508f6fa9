"""The default graph on real stores: coverage, values, determinism, ranks."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from insitubatch_nodes import SAMPLE_INDEX_KEY, ZarrSource, build_loader
from tests.helpers.batches import batch_key
from tests.helpers.stores import write_store


def _epoch(loader: Any) -> list[dict[str, torch.Tensor]]:
    return list(loader)


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("where", ["memory", "file"])
def test_every_sample_of_the_split_once_with_the_stored_values(
    where: str, zarr_format: int, tmp_path: Path, memory_url: Any
) -> None:
    if where == "memory":
        url, truth = memory_url(zarr_format=zarr_format)
    else:
        url, truth = write_store(tmp_path / "store.zarr", zarr_format=zarr_format)
    loader = build_loader(url, split="train", batch_size=5, block_chunks=2, seed=1)
    batches = _epoch(loader)
    train = ZarrSource.open(url).manifest.units("train")
    unit = ZarrSource.open(url).geometry.unit_length
    expected = {i for u in train.tolist() for i in range(u * unit, min((u + 1) * unit, 88))}
    seen = Counter(int(i) for b in batches for i in b[SAMPLE_INDEX_KEY].tolist())
    assert set(seen) == expected and set(seen.values()) == {1}
    for batch in batches:
        index = batch[SAMPLE_INDEX_KEY].cpu().numpy()
        assert batch[SAMPLE_INDEX_KEY].dtype == torch.int64
        for name, values in truth.items():
            got = batch[name]
            assert got.dtype == torch.from_numpy(values[:1]).dtype
            assert np.array_equal(got.cpu().numpy(), values[index])
    assert all(len(b[SAMPLE_INDEX_KEY]) == 5 for b in batches[:-1])


def test_same_seed_same_batches_and_next_epoch_differs(memory_url: Any) -> None:
    url, _ = memory_url()
    first = build_loader(url, split="all", batch_size=4, seed=7)
    second = build_loader(url, split="all", batch_size=4, seed=7)
    epoch0 = [batch_key(b) for b in first]
    assert epoch0 == [batch_key(b) for b in second]
    epoch1 = [batch_key(b) for b in first]
    assert epoch1 != epoch0
    assert sorted(epoch0) != epoch0  # not in storage order
    other_seed = [batch_key(b) for b in build_loader(url, split="all", batch_size=4, seed=8)]
    assert other_seed != epoch0


@pytest.mark.parametrize("world_size", [2, 3])
@pytest.mark.parametrize("drop_last", [False, True])
def test_ranks_step_together_and_cover_the_split(
    memory_url: Any, world_size: int, drop_last: bool
) -> None:
    url, _ = memory_url()
    per_rank = []
    for rank in range(world_size):
        loader = build_loader(
            url,
            split="all",
            batch_size=4,
            block_chunks=1,
            rank=rank,
            world_size=world_size,
            drop_last=drop_last,
        )
        per_rank.append([b[SAMPLE_INDEX_KEY].tolist() for b in loader])
    assert len({len(batches) for batches in per_rank}) == 1
    flat = [i for batches in per_rank for b in batches for i in b]
    if drop_last:
        assert len(flat) == len(set(flat))
        assert all(len(b) == 4 for batches in per_rank for b in batches)
    else:
        assert set(flat) == set(range(88))
    # each rank's own samples never repeat, except the documented padding at the end
    for batches in per_rank:
        mine = [i for b in batches for i in b]
        if not drop_last:
            real = len(set(mine))
            assert mine[:real] == list(dict.fromkeys(mine))[:real]


def test_rank_and_world_size_default_from_the_environment(
    memory_url: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = memory_url()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    from_env = [b[SAMPLE_INDEX_KEY].tolist() for b in build_loader(url, split="all")]
    explicit = [
        b[SAMPLE_INDEX_KEY].tolist() for b in build_loader(url, split="all", rank=1, world_size=2)
    ]
    assert from_env == explicit
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    single = [b[SAMPLE_INDEX_KEY].tolist() for b in build_loader(url, split="all")]
    assert sum(len(b) for b in single) == 88


def test_a_user_store_object_is_used_as_given(memory_url: Any) -> None:
    url, truth = memory_url()
    store = ZarrSource.open(url).store
    batches = list(build_loader(store, ["u10"], split="all", batch_size=88))
    assert len(batches) == 1 and set(batches[0]) == {"u10", SAMPLE_INDEX_KEY}
    index = batches[0][SAMPLE_INDEX_KEY].cpu().numpy()
    assert np.array_equal(batches[0]["u10"].cpu().numpy(), truth["u10"][index])


def test_default_variables_skip_coordinate_arrays(memory_url: Any) -> None:
    url, _ = memory_url(extra_arrays={"latitude": np.linspace(90, -90, 3)})
    assert sorted(ZarrSource.open(url).layouts) == ["t2m", "u10"]


def test_sharded_v3_array_reads_inner_chunks() -> None:
    import zarr

    from insitubatch_nodes import forget_memory_store, memory_store

    group = zarr.open_group(memory_store("sharded-e2e"), mode="w")
    values = np.arange(40 * 6, dtype="float32").reshape(40, 6)
    sharded = group.create_array("x", shape=(40, 6), chunks=(2, 3), shards=(8, 6), dtype="float32")
    sharded[...] = values
    try:
        batches = list(build_loader("memory://sharded-e2e", split="all", batch_size=7))
    finally:
        forget_memory_store("sharded-e2e")
    index = np.concatenate([b[SAMPLE_INDEX_KEY].cpu().numpy() for b in batches])
    assert sorted(index.tolist()) == list(range(40))
    got = np.concatenate([b["x"].cpu().numpy() for b in batches])
    assert np.array_equal(got, values[index])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_missing_chunks_read_as_the_fill_value(zarr_format: int) -> None:
    import zarr

    from insitubatch_nodes import forget_memory_store, memory_store

    name = f"missing-{zarr_format}"
    store = memory_store(name)
    group = zarr.open_group(store, mode="w", zarr_format=zarr_format)
    array = group.create_array("x", shape=(20, 3), chunks=(4, 3), dtype="float32", fill_value=-7)
    array[:8] = 1.0  # chunks 2..4 are never written
    try:
        batches = list(build_loader(f"memory://{name}", split="all", batch_size=6))
        index = np.concatenate([b[SAMPLE_INDEX_KEY].cpu().numpy() for b in batches])
        values = np.concatenate([b["x"].cpu().numpy() for b in batches])
        assert sorted(index.tolist()) == list(range(20))
        assert (values[index < 8] == 1.0).all() and (values[index >= 8] == -7).all()
    finally:
        forget_memory_store(name)
