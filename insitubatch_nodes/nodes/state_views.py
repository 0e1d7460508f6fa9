"""Source states kept by the nodes without a deep copy on every pull; copied once, when a
state is asked for (issue 33).

A node that pulls keeps its source's state from some point (the fetch node per plan, the
pool shuffle from before each block, the device node per batch), so that its own state
can say where to resume. Taken with `state_dict()`, each level deep-copied what the level
below gave it, and one batch copied the nested state several times over, on the main
thread. A node that offers `SharesState` hands out its state without that copy: whoever
keeps it must never change it, and the node never changes it either (it builds a new
dict per call, and replaces, never edits, the states it keeps). Its `get_state` is a
deep copy of that view, so what `state_dict()` returns is still a snapshot: neither later
pulls nor an edit of the returned dict reach the node or another state. A view may hold a
part that only that copy makes plain (the pool's resident units,
`nodes.pool_cursor.ResidentPairs`, whose `__deepcopy__` writes its pairs out).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from torchdata.nodes import BaseNode


@runtime_checkable
class SharesState(Protocol):
    """Gives its state without copying it, to a node downstream that keeps it unchanged
    (see the module)."""

    def state_view(self) -> dict[str, Any]: ...


def state_reader(source: BaseNode[Any]) -> Callable[[], dict[str, Any]]:
    """How a node reads the state of `source` to keep it: its `state_view` where it offers
    one, else `state_dict` (a copy). Resolved once, when the node is built. The view skips
    `BaseNode.state_dict`'s lazy reset, so read it only once `source` was reset or pulled.

    Args:
        source: the node's source.
    """
    if isinstance(source, SharesState):
        return source.state_view
    return source.state_dict


def snapshot(view: dict[str, Any]) -> dict[str, Any]:
    """A state to hand out of a node (`get_state`): a deep copy of its view, which nothing
    done to the node or to the copy afterwards changes.

    Args:
        view: the node's state as `state_view` gives it.
    """
    return copy.deepcopy(view)
