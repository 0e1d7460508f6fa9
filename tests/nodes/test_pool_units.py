"""PoolUnits: the pool's counts kept in arrays give what the per-unit walk gave, and the
resident units' pairs a state names."""

from __future__ import annotations

import copy
import json

import numpy as np

from insitubatch_nodes.nodes.pool_cursor import ResidentPairs
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


def test_the_resident_units_with_what_they_gave_follow_the_draws() -> None:
    pool: PoolUnits[str] = PoolUnits()
    pool.append("a", 7, 3)
    pool.append("b", 4, 1, given=2)  # a restored unit that gave 2 of its 3
    positions, given = pool.resident()
    assert positions.tolist() == [7, 4] and given.tolist() == [0, 2]
    pool.give(np.array([2, 1]))
    assert [a.tolist() for a in pool.resident()] == [[7], [2]]
    positions[...] = -1  # copies: the pool keeps its own
    assert pool.resident()[0].tolist() == [7]


def test_resident_pairs_are_made_plain_by_the_copy_that_hands_a_state_out() -> None:
    """Pool units first, in pool order, then the restored units not read yet: the order
    the pool's walk over its units gave; the copy is plain lists of ints."""
    view = {"resident": ResidentPairs(np.array([9, 3]), np.array([1, 0]), [(5, 2), (6, 0)])}
    handed_out = copy.deepcopy(view)
    assert handed_out == {"resident": [[9, 1], [3, 0], [5, 2], [6, 0]]}
    assert all(type(v) is int for pair in handed_out["resident"] for v in pair)
    assert json.loads(json.dumps(handed_out)) == handed_out
