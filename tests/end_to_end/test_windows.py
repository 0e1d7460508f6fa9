"""Windowed samples on real zarr stores: values, split boundaries, shared halo reads, resume."""

from __future__ import annotations

import functools
from collections import Counter
from typing import Any

import numpy as np
import pytest

from insitubatch_nodes import (
    SAMPLE_INDEX_KEY,
    AnchorSet,
    AsyncFetchNode,
    SampleSpec,
    ZarrSource,
    build_loader,
    leads,
    window,
)
from insitubatch_nodes.nodes.graph import graph_nodes
from tests.helpers.graphs import STAGES, build_stage
from tests.helpers.resume_check import check_every_cut

SPEC = SampleSpec(
    {"inputs": window(["t2m", "u10"], steps=2, stride=2), "targets": leads(["t2m"], [1, 3])}
)

cpu_loader = functools.partial(build_loader, device="cpu")  # batches read as numpy


def _fetch(loader: Any) -> AsyncFetchNode:
    return next(n for n in graph_nodes(loader.root) if isinstance(n, AsyncFetchNode))


@pytest.mark.parametrize("split", ["train", "val", "all"])
def test_windows_hold_the_stored_steps_and_never_leave_the_split(
    memory_url: Any, split: str
) -> None:
    url, truth = memory_url()
    loader = cpu_loader(url, split=split, spec=SPEC, batch_size=4, block_chunks=2, seed=5)
    source = ZarrSource.open(url)
    in_split = np.zeros(88, dtype=bool)
    in_split[source.geometry.unit_samples(source.split_units(split))] = True
    seen: Counter[int] = Counter()
    for batch in loader:
        anchors = batch[SAMPLE_INDEX_KEY].numpy()
        seen.update(anchors.tolist())
        assert set(batch) == {"inputs/t2m", "inputs/u10", "targets/t2m", SAMPLE_INDEX_KEY}
        for key, offsets in [
            ("inputs/t2m", (-2, 0)),
            ("inputs/u10", (-2, 0)),
            ("targets/t2m", (1, 3)),
        ]:
            steps = anchors[:, None] + np.array(offsets)[None, :]
            assert in_split[steps].all(), f"{key} read a step outside split {split!r}"
            variable = key.split("/")[1]
            got = batch[key].numpy()
            assert got.shape == (anchors.size, 2, *truth[variable].shape[1:])
            assert np.array_equal(got, truth[variable][steps])
    expected = AnchorSet.for_split(source.geometry, source.split_units(split), SPEC)
    assert sorted(seen) == sorted(expected.unit_samples(expected.units).tolist())
    assert set(seen.values()) == {1}


def test_a_spec_whose_span_exceeds_the_split_is_refused(memory_url: Any) -> None:
    url, _ = memory_url()
    too_long = SampleSpec({"x": window(["t2m"], steps=12)})  # val: 9 steps of t2m
    with pytest.raises(ValueError, match=r"no anchor whose steps t-11 \.\. t\+0"):
        cpu_loader(url, split="val", spec=too_long)
    with pytest.raises(ValueError, match="not selected"):
        cpu_loader(url, ["u10"], split="train", spec=SPEC)


@pytest.mark.parametrize("stage", STAGES)
def test_windowed_stages_resume_at_every_cut(memory_url: Any, stage: str) -> None:
    url, _ = memory_url()
    check_every_cut(
        lambda: build_stage(url, stage, split="train", block_chunks=2, batch_size=7, spec=SPEC)
    )


@pytest.mark.parametrize(("world_size", "drop_last"), [(2, False), (3, True)])
def test_windowed_loader_resumes_on_every_rank(
    memory_url: Any, world_size: int, drop_last: bool
) -> None:
    url, _ = memory_url()
    for rank in range(world_size):
        check_every_cut(
            lambda rank=rank: (
                cpu_loader(
                    url,
                    split="train",
                    spec=SPEC,
                    batch_size=6,
                    block_chunks=2,
                    rank=rank,
                    world_size=world_size,
                    drop_last=drop_last,
                    max_inflight=3,
                ).root
            ),
            cuts=[0, 1, 3],
        )


def _window_reads(memory_url: Any, steps_per_chunk: int, block_chunks: int) -> tuple[int, int]:
    url, _ = memory_url({"t": ((192, 4, 4), (steps_per_chunk, 4, 4), "float32")})
    spec = SampleSpec({"inputs": window(["t"], steps=2)})
    loader = cpu_loader(url, split="all", spec=spec, batch_size=16, block_chunks=block_chunks)
    samples = sum(len(b[SAMPLE_INDEX_KEY]) for b in loader)
    return _fetch(loader).stats.chunks_read, samples


@pytest.mark.parametrize(
    ("steps_per_chunk", "block_chunks", "most_reads"),
    # per block of k units of L steps: at most k * (L + 1) reads for k * L anchors
    [(8, 4, 9 / 8), (4, 4, 5 / 4), (1, 8, 2.0)],
)
def test_a_two_step_window_shares_chunk_reads(
    memory_url: Any, steps_per_chunk: int, block_chunks: int, most_reads: float
) -> None:
    reads, samples = _window_reads(memory_url, steps_per_chunk, block_chunks)
    assert samples == 191  # the first step has no previous one
    naive = 2 * samples  # one read per step per sample
    assert reads <= most_reads * samples + block_chunks
    assert reads < naive
