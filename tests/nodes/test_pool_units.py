"""PoolUnits: the pool's counts kept in one array give what the per-unit walk gave."""

from __future__ import annotations

import numpy as np

from insitubatch_nodes.nodes.pool_units import PoolUnits


def test_draws_update_the_counts_and_drop_the_drained_units_in_pool_order() -> None:
    pool: PoolUnits[str] = PoolUnits()
    for position, (name, left) in enumerate([("a", 3), ("b", 1), ("c", 2)]):
        pool.append(name, position + 10, left)
    assert len(pool) == 3 and pool.samples == 6
    assert pool.left().tolist() == [3, 1, 2]
    assert pool.give(np.array([1, 1, 0])) == [("a", 1, False), ("b", 1, True)]
    assert list(pool) == ["a", "c"] and pool.left().tolist() == [2, 2]
    assert pool.samples == 4 and pool.oldest_position() == 10
    pool.append("d", 13, 1)
    assert pool.give(np.array([2, 0, 0])) == [("a", 2, True)]
    assert list(pool) == ["c", "d"] and pool.oldest_position() == 12
    assert pool.give(np.array([2, 1])) == [("c", 2, True), ("d", 1, True)]
    assert len(pool) == 0 and pool.samples == 0 and pool.oldest_position() is None


def test_a_unit_that_enters_with_nothing_left_leaves_at_the_next_draw_unvisited() -> None:
    pool: PoolUnits[str] = PoolUnits()
    pool.append("empty", 0, 0)
    pool.append("full", 1, 2)
    assert pool.give(np.array([0, 1])) == [("full", 1, False)]
    assert list(pool) == ["full"]
