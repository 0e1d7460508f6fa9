"""The pool shuffle's saved cursor: the state `PoolShuffleNode` saves, how a saved one is
taken up, and which units it says were drained.

The node draws batches; this module holds the format of where it stands. It exists apart
so that the format lives in one place: the keys, the checks a loaded state passes before
any of it is used, which states of earlier order versions resume under which settings
(the rules a new order version has to extend), and which units a restored cursor says
were drained (`core.drained_units`), which the node tells the block planner it is linked
to (the `ReadPlanNode` upstream), so that the rest of the epoch is planned without them.
The cursor is O(P) plain ints: the position of the next unit to enter, the resident units
as [position, given] pairs, the samples yielded and the samples the epoch yields; the
source state from just before the oldest block still needed goes with it. The checks that
need the epoch's data (a unit's size, the epoch's units and samples) are made by the node
once its first block is here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from insitubatch_nodes.core.drained_units import DrainedUnits
from insitubatch_nodes.core.pool_order import (
    POOL_ORDER,
    POOL_ORDER_VERSION,
    POOL_ORDER_VERSION_GROUPED,
)
from insitubatch_nodes.nodes.state_checks import (
    CONFIG_KEY,
    SHUFFLE_SOURCE_KEY,
    SHUFFLE_TARGET_KEY,
    NamedNode,
    check_cursor,
    cursor_out_of_range,
    named_state,
    restore_shuffle_state,
)

NEXT_KEY = "next_unit"
RESIDENT_KEY = "resident"
YIELDED_KEY = "samples_yielded"
RAMP_KEY = "pool_ramp"
INTERLEAVE_KEY = "pool_interleave"
_KEYS = (SHUFFLE_SOURCE_KEY, NEXT_KEY, RESIDENT_KEY, YIELDED_KEY, SHUFFLE_TARGET_KEY)


class ResidentPairs:
    """A state's resident units as `[position, given]` pairs, kept as the pool's two arrays
    until the state is copied out.

    The device node keeps its source's state after every batch (`nodes.state_views`), and
    written out there the pairs were O(P) Python objects per batch, hundreds of them at
    one step per chunk, for a state asked for once in many batches. A view holds this
    instead: two array copies, never changed; the copy that hands a state out
    (`state_views.snapshot`, a `copy.deepcopy`) makes it the plain list of pairs, in the
    order the pool holds its units, then the restored units not read yet, by position.

    Args:
        positions: each pool unit's position in the rank's unit order, in pool order.
        given: the samples each gave.
        restored: (position, given) of a restored state's units not back in the pool yet.
    """

    __slots__ = ("_given", "_positions", "_restored")

    def __init__(
        self, positions: np.ndarray, given: np.ndarray, restored: list[tuple[int, int]]
    ) -> None:
        self._positions = positions
        self._given = given
        self._restored = restored

    def pairs(self) -> list[list[int]]:
        """The state's plain list of `[position, given]` pairs."""
        pairs = [
            list(pair) for pair in zip(self._positions.tolist(), self._given.tolist(), strict=True)
        ]
        return pairs + [[position, given] for position, given in self._restored]

    def __deepcopy__(self, memo: dict[int, Any]) -> list[list[int]]:
        return self.pairs()


@dataclass(frozen=True)
class SavedPoolCursor:
    """Where a pool shuffle stands in a rank's epoch, as its state saves it.

    Args:
        next_unit: the position (in the rank's unit order) of the next unit to enter the
            pool.
        resident: the units in the pool, position -> samples it gave, in the order saved
            (a restored cursor's), or a node's `ResidentPairs` (a state it gives out).
        samples_yielded: the samples the epoch has yielded.
        samples_target: the samples the rank's epoch yields; None before its first block.
    """

    next_unit: int
    resident: dict[int, int] | ResidentPairs
    samples_yielded: int
    samples_target: int | None

    def drained_units(self) -> DrainedUnits | None:
        """The units of the epoch drained before the cut (None: none, or a state saved
        before the epoch's first block)."""
        assert isinstance(self.resident, dict), "a restored cursor's"
        if self.samples_target is None or self.next_unit <= len(self.resident):
            return None
        return DrainedUnits.of(self.next_unit, self.resident, self.samples_target)

    def saved(
        self, node: NamedNode, source_state: Mapping[str, Any], config: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The node's state for this cursor (`get_state`).

        Args:
            node: the pool shuffle node whose state this is.
            source_state: the source's state from just before the oldest block still
                needed, put in as it is (the node copies its state where it hands it
                out, `nodes.state_views`; so are `ResidentPairs`, made plain by that
                copy).
            config: the node's settings, as it saves them.
        """
        return named_state(
            node,
            {
                SHUFFLE_SOURCE_KEY: source_state,
                NEXT_KEY: self.next_unit,
                RESIDENT_KEY: self.resident
                if isinstance(self.resident, ResidentPairs)
                else [[p, g] for p, g in self.resident.items()],
                YIELDED_KEY: self.samples_yielded,
                SHUFFLE_TARGET_KEY: self.samples_target,
                CONFIG_KEY: dict(config),
            },
        )


def restore_cursor(
    node: Any,
    initial_state: Any,
    config: Mapping[str, Any],
    *,
    order_version: int,
    pool_ramp: int,
    pool_interleave: bool,
) -> SavedPoolCursor:
    """Take up a saved cursor: the node's source is restored first, so that a state from
    other data or settings upstream is refused for that (`restore_shuffle_state`), then
    the order version, the keys, the config and the cursors are checked.

    Version 2 is version 3 without the interleave, and version 1 version 2 without a ramp:
    their states resume in a loader without them, and a refusal names the setting.

    Args:
        node: the pool shuffle node (its `source` is reset to the saved source state).
        initial_state: the node's part of a loaded state.
        config: the node's settings, as it saves them.
        order_version: the pool order version the node draws.
        pool_ramp: the node's `pool_ramp`.
        pool_interleave: the node's `pool_interleave`.

    Raises:
        TypeError, ValueError: the state is damaged, or saved by another loader.
    """
    grouped, no_ramp = f"{INTERLEAVE_KEY}=False", f"{RAMP_KEY}=0"
    state, target = restore_shuffle_state(
        node,
        initial_state,
        _KEYS,
        POOL_ORDER,
        order_version,
        config,
        resumes=(1,) if not pool_interleave and pool_ramp == 0 else (),
        drawn_with={
            1: no_ramp if not pool_interleave else f"{grouped}, {no_ramp}",
            POOL_ORDER_VERSION_GROUPED: grouped,
            POOL_ORDER_VERSION: f"{INTERLEAVE_KEY}=True",
        },
    )
    yielded = check_cursor(node, state, YIELDED_KEY, 0, target or 0)
    next_unit = check_cursor(node, state, NEXT_KEY, 0)
    resident = state[RESIDENT_KEY]
    pairs_ok = isinstance(resident, list) and all(
        isinstance(p, list)
        and len(p) == 2
        and all(type(v) is int and v >= 0 for v in p)
        and p[0] < next_unit
        for p in resident
    )
    if not pairs_ok or len({p[0] for p in resident}) != len(resident):
        allowed = "distinct [position, given] pairs of ints >= 0, positions < next_unit"
        raise cursor_out_of_range(node, RESIDENT_KEY, resident, allowed)
    return SavedPoolCursor(next_unit, {p[0]: p[1] for p in resident}, yielded, target)
