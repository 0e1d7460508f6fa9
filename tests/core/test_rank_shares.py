"""The ranks' shares of a split and the full-batch check, as pure functions: the same counts
an epoch's assignment carries, the same refusals the loader gives, and what the permutation
node answers when asked."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from insitubatch_nodes.core.evaluation_shares import assign_evaluation
from insitubatch_nodes.core.geometry import SampleGeometry, VariableLayout
from insitubatch_nodes.core.partition import assign_epoch
from insitubatch_nodes.core.rank_shares import (
    EVALUATION_DROP_LAST,
    RankShares,
    check_full_batch,
    rank_shares,
)
from insitubatch_nodes.nodes.chunk_permute import ChunkPermuteNode
from tests.helpers.strategies import geometries


@given(geometries(max_samples=120), st.integers(1, 4), st.booleans(), st.integers(0, 3))
def test_the_shares_are_those_every_epoch_deals(
    geometry: SampleGeometry, world_size: int, evaluation: bool, epoch: int
) -> None:
    split = np.arange(geometry.num_units)
    if split.size < world_size:
        return
    for rank in range(world_size):
        shares = rank_shares(
            geometry,
            split,
            rank=rank,
            world_size=world_size,
            partitions=None,
            evaluation=evaluation,
        )
        assign = assign_evaluation if evaluation else assign_epoch
        a = assign(geometry, split, seed=5, epoch=epoch, rank=rank, world_size=world_size)
        counts = (shares.rank_samples, shares.min_rank_samples, shares.max_rank_samples)
        assert counts == (a.rank_samples, a.min_rank_samples, a.max_rank_samples)
        assert shares.evaluation == evaluation
        for batch_size, drop_last in ((1, False), (7, True), (7, False)):
            expected = a.samples_per_rank(batch_size, drop_last)
            assert shares.samples_per_epoch(batch_size, drop_last) == expected


def test_a_batch_no_rank_fills_is_refused_as_the_node_refuses_it() -> None:
    shares = RankShares(rank_samples=9, min_rank_samples=8, max_rank_samples=9, partitions=2)
    check_full_batch(shares, 8, True, "train")
    check_full_batch(shares, 9, False, "train")
    with pytest.raises(ValueError) as refused:
        check_full_batch(shares, 9, True, "train")
    assert str(refused.value) == (
        "batch_size=9 with drop_last=True leaves no full batch: the smallest rank holds 8 "
        "samples of split 'train'; lower batch_size or set drop_last=False"
    )
    evaluation = RankShares(9, 8, 9, partitions=2, evaluation=True)
    with pytest.raises(ValueError) as refused:
        check_full_batch(evaluation, 1, True, "val")
    assert str(refused.value) == EVALUATION_DROP_LAST
    with pytest.raises(TypeError, match=r"batch_size must be an int >= 1, got 2\.0"):
        check_full_batch(shares, 2.0, False, "train")  # type: ignore[arg-type]


def test_the_node_counts_and_checks_with_the_same_functions() -> None:
    geometry = SampleGeometry.from_layouts({"a": VariableLayout((17, 1), (4, 1), "float32")})
    split = np.arange(geometry.num_units)
    node = ChunkPermuteNode(geometry, split, rank=1, world_size=2)
    shares = rank_shares(geometry, split, rank=1, world_size=2, partitions=None, evaluation=False)
    assert node.samples_per_epoch(4, True) == shares.samples_per_epoch(4, True)
    with pytest.raises(ValueError) as by_node:
        node.check_full_batch(9, True, "train")
    with pytest.raises(ValueError) as by_function:
        check_full_batch(shares, 9, True, "train")
    assert str(by_node.value) == str(by_function.value)
