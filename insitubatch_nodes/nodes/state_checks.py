"""Refuse a state that does not belong to this graph, instead of resuming wrongly.

A state is loaded into a graph built anew, maybe with other settings, on other data, with
a stage more or less, or after it went through a file someone edited. Each node checks
the part of the state that is its own on `reset(state)`, with the helpers here:

- its shape: a dict, with the keys the node writes, and written by the same kind of node
  (every state names its node, `NODE_KEY`: a state saved with `stack=True` holds a
  `StackChannelsNode` where a graph without it has a `GatherNode`);
- its cursors: ints (not floats, strings or bools) in the range the node can be at;
- its settings (`CONFIG_KEY`): resume is exact only for the same seed, world size, block
  size and batch size;
- the data it was counted on (`FINGERPRINT_KEY`, see `core.fingerprint`).

Every refusal says what differs or is wrong, where (the node, the key), and what to do.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from insitubatch_nodes.core.draw_order import BLOCK_ORDER
from insitubatch_nodes.core.fingerprint import fingerprint_differences
from insitubatch_nodes.core.pool_order import POOL_ORDER
from insitubatch_nodes.nodes import state_names

CONFIG_KEY = "config"
DIGEST_KEY = "digest"
NODE_KEY = "node"
FINGERPRINT_KEY = "fingerprint"

_SAVED_AS_IS = "pass the dict loader.state_dict() returned, as it was saved"


class NamedNode(Protocol):
    """What a node whose state is checked here declares: the name its state is saved
    under, and refusals name it by (`nodes.state_names`)."""

    STATE_NAME: ClassVar[str]


def node_name(node: NamedNode) -> str:
    """The name a node's state is saved under, and refusals name it by.

    Args:
        node: the node.
    """
    return node.STATE_NAME


def named_state(node: NamedNode, entries: Mapping[str, Any]) -> dict[str, Any]:
    """`entries` with the node's name, for `get_state`.

    Args:
        node: the node whose state this is.
        entries: the node's own state entries.
    """
    return {NODE_KEY: node_name(node), **entries}


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def check_node_state(
    node: NamedNode, state: Any, keys: Sequence[str], *, named: bool = True
) -> Mapping[str, Any]:
    """`state` if it is a dict saved by this kind of node with all of `keys`; else an
    error naming the node and what is wrong. A state without a node name (saved before
    states carried one) is taken on its keys.

    Args:
        node: the node the state is loaded into.
        state: the node's part of a loaded state.
        keys: the keys the node reads from it.
        named: whether the node names its states (`named_state`); the `Loader`'s own
            layout is torchdata's, which does not.

    Raises:
        TypeError: `state` is not a dict.
        ValueError: it was saved by another kind of node, or lacks some of `keys`.
    """
    name = node_name(node)
    if not isinstance(state, Mapping):
        raise TypeError(
            f"the {name} state must be a dict, got {type(state).__name__} {_shown(state)}; "
            f"{_SAVED_AS_IS}"
        )
    saved = state.get(NODE_KEY, name) if named else name
    if saved != name:
        raise ValueError(
            f"the state holds a {saved} where this graph has a {name}: it was saved from a "
            f"graph with a stage more or less (build_loader's stack=, normalise= or "
            f"forcings=, or a node added by hand); build the loader with the stages it had "
            f"when the state was saved"
        )
    missing = [key for key in keys if key not in state]
    if missing:
        raise ValueError(
            f"the {name} state lacks {missing} (it has {sorted(map(str, state))}): it was "
            f"not saved by a {name}; {_SAVED_AS_IS}"
        )
    return state


def source_part(node: NamedNode, state: Any, key: str = "source") -> Any:
    """The part of a node's state that its source takes up, for the nodes that hold
    nothing else; None (a fresh start) for no state.

    Args:
        node: the node the state is loaded into.
        state: the node's part of a loaded state, or None.
        key: the key of its source's part.
    """
    return None if state is None else check_node_state(node, state, (key,))[key]


def check_cursor(
    node: NamedNode, state: Mapping[str, Any], key: str, minimum: int, maximum: int | None = None
) -> int:
    """The int at `state[key]`, refused unless it is an int in [minimum, maximum].

    Args:
        node: the node the state is loaded into.
        state: the node's part of a loaded state (already through `check_node_state`).
        key: the cursor's key.
        minimum: the smallest value the node can be at.
        maximum: the largest, or None for no bound.

    Raises:
        TypeError: the value is not an int (a float, a string, a bool, ...).
        ValueError: the value is out of range.
    """
    value = state[key]
    allowed = f">= {minimum}" if maximum is None else f"{minimum} .. {maximum}"
    if type(value) is not int:
        raise TypeError(
            f"the {node_name(node)} state's {key!r} must be an int {allowed}, got "
            f"{_shown(value)} ({type(value).__name__}): the state is damaged; {_SAVED_AS_IS}"
        )
    if value < minimum or (maximum is not None and value > maximum):
        raise cursor_out_of_range(node, key, value, allowed)
    return value


def cursor_out_of_range(node: NamedNode, key: str, value: int, allowed: str) -> ValueError:
    """The error for a cursor outside what the node can be at, for checks that can only
    be made once the data it counts is known (e.g. a block's size).

    Args:
        node: the node the state is loaded into.
        key: the cursor's key.
        value: the cursor's value.
        allowed: the values it may take, in words (e.g. "0 .. 12").
    """
    return ValueError(
        f"the {node_name(node)} state's {key!r} is {value}, outside the allowed range "
        f"{allowed}: the state is damaged or was saved by another loader; {_SAVED_AS_IS}, "
        f"into a loader built like the one that saved it"
    )


def check_saved_config(
    node: NamedNode, state: Mapping[str, Any], current: Mapping[str, Any]
) -> None:
    """Refuse a state saved under other settings than `current`, naming each difference.

    Args:
        node: the node the state is loaded into.
        state: the node's part of a loaded state.
        current: the settings of this graph's node, as the node saves them.

    Raises:
        ValueError: a setting differs.
    """
    saved = state.get(CONFIG_KEY, {})
    if not isinstance(saved, Mapping):
        raise TypeError(
            f"the {node_name(node)} state's {CONFIG_KEY!r} must be a dict, got "
            f"{_shown(saved)}: the state is damaged; {_SAVED_AS_IS}"
        )
    changed = {k: (saved[k], v) for k, v in current.items() if k in saved and saved[k] != v}
    if changed:
        raise ValueError(
            f"{node_name(node)} state was saved with "
            + ", ".join(f"{k}={old!r}" for k, (old, _) in changed.items())
            + " but this graph has "
            + ", ".join(f"{k}={new!r}" for k, (_, new) in changed.items())
            + "; rebuild the loader with the saved settings to resume"
        )


def check_fingerprint(state: Mapping[str, Any], current: Mapping[str, Any] | None) -> None:
    """Refuse a state saved on other data than `current` (`ZarrSource.fingerprint`),
    naming each difference. A state saved without a fingerprint (before states had one,
    or by a graph built without one), or a graph without one, is not checked.

    Args:
        state: the node's part of a loaded state.
        current: the fingerprint of the data this graph reads, or None.

    Raises:
        ValueError: the data differ.
    """
    saved = state.get(FINGERPRINT_KEY)
    if saved is None or current is None:
        return
    differences = fingerprint_differences(saved, current)
    if differences:
        raise ValueError(
            "this state was saved on other data than this loader reads: "
            + "; ".join(differences)
            + ". Resume with the store, variables, split and manifest the state was saved on "
            "(for Icechunk, open_icechunk(..., snapshot_id=...) at the saved snapshot), or "
            "start this loader without the state"
        )


def _digest_of(state: Mapping[str, Any]) -> str:
    entries = {key: value for key, value in state.items() if key != DIGEST_KEY}
    text = json.dumps(entries, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def with_digest(state: Mapping[str, Any]) -> dict[str, Any]:
    """`state` with a digest of itself: a cursor edited to another value that is still in
    range (samples skipped or drawn twice) cannot be told from a real one by range checks.

    Args:
        state: a whole loader state (plain data).
    """
    return {**state, DIGEST_KEY: _digest_of(state)}


def check_state_digest(state: Mapping[str, Any]) -> None:
    """Refuse a loader state that no longer matches the digest it was saved with (states
    saved before digests existed have none, and are taken as they are).

    Args:
        state: a whole loader state, as loaded.

    Raises:
        ValueError: the state was changed after it was saved.
    """
    saved = state.get(DIGEST_KEY)
    if saved is not None and saved != _digest_of(state):
        raise ValueError(
            "the loader state does not match the digest it was saved with: it was edited or "
            f"damaged after loader.state_dict() made it; {_SAVED_AS_IS}"
        )


# Which shuffle order each shuffle node's states were made with, by the name they are saved
# under (states saved before the order was recorded in their config are the block
# order's, version 1).
SHUFFLE_NODE_ORDERS = {state_names.SHUFFLE_BLOCK: BLOCK_ORDER, state_names.POOL_SHUFFLE: POOL_ORDER}
ORDER_KEY = "order"
ORDER_VERSION_KEY = "order_version"


def check_shuffle_order(
    state: Any,
    order: str,
    version: int,
    *,
    resumes: Collection[int] = (),
    drawn_with: Mapping[int, str] | None = None,
) -> None:
    """Refuse, naming the setting that resumes it, a state made by another shuffle order
    (`build_loader(shuffle=)`) or another version of this one: its cursor counts another
    sequence of batches.

    Args:
        state: the shuffle node's part of a loaded state (anything: checked further by
            `check_node_state`).
        order: this node's order (`"block"` or `"pool"`).
        version: the version of it this node draws.
        resumes: earlier versions that this node, as it is set up, draws exactly too.
        drawn_with: other versions this library draws under another setting, each with
            that setting (as `build_loader` takes it), which a refusal names.

    Raises:
        ValueError: the state was made by another order or version.
    """
    if not isinstance(state, Mapping):
        return
    saved_node = state.get(NODE_KEY)
    config = state.get(CONFIG_KEY)
    saved_order = SHUFFLE_NODE_ORDERS.get(saved_node) if isinstance(saved_node, str) else None
    saved_version = 1
    if isinstance(config, Mapping):
        saved_order = config.get(ORDER_KEY, saved_order)
        saved_version = config.get(ORDER_VERSION_KEY, 1)
    if saved_order is None or (saved_order == order and saved_version in (version, *resumes)):
        return
    if saved_order != order:
        raise ValueError(
            f"this state was made by the {saved_order!r} shuffle (version {saved_version}) "
            f"and this loader draws the {order!r} shuffle: the state counts other batches. "
            f"Build the loader with shuffle={saved_order!r} to resume it"
        )
    setting = (drawn_with or {}).get(saved_version)
    if setting is not None:
        raise ValueError(
            f"this state was made by version {saved_version} of the {order!r} shuffle, "
            f"which this loader draws only with {setting} (it draws version {version}): the "
            f"state counts other batches. Build the loader with {setting} to resume it "
            f"exactly, or start the epoch afresh"
        )
    raise ValueError(
        f"this state was made by version {saved_version} of the {order!r} shuffle and this "
        f"loader draws version {version}: the state counts other batches. Resume it with "
        f"the release that saved it, or start the epoch afresh"
    )


SHUFFLE_SOURCE_KEY = "source"
SHUFFLE_TARGET_KEY = "samples_this_epoch"


def restore_shuffle_state(
    node: Any,
    initial_state: Any,
    keys: Sequence[str],
    order: str,
    version: int,
    config: Mapping[str, Any],
    *,
    resumes: Collection[int] = (),
    drawn_with: Mapping[int, str] | None = None,
) -> tuple[Mapping[str, Any], int | None]:
    """What both shuffle nodes check first when they take up a saved cursor, in the order
    that names the most basic difference: the source is restored first (other data, or an
    evaluation state in a training loader or the reverse, is named before the order those
    draw in), then the order and its version, the node's keys, its config, and the epoch's
    sample count (None when saved before the epoch's first block).

    Args:
        node: the shuffle node (its `source` is reset to the saved source state).
        initial_state: the node's part of a loaded state.
        keys: the keys the node's state holds.
        order: the node's shuffle order (`"block"` or `"pool"`).
        version: the node's version of it.
        config: the node's config, to hold the saved one against (but its order version:
            a state of an earlier one it resumes says that one).
        resumes: earlier versions the node draws exactly too (`check_shuffle_order`).
        drawn_with: other versions drawn under another setting (`check_shuffle_order`).

    Returns:
        The checked state, and the epoch's sample count or None.
    """
    if isinstance(initial_state, dict) and SHUFFLE_SOURCE_KEY in initial_state:
        node.source.reset(initial_state[SHUFFLE_SOURCE_KEY])
    check_shuffle_order(initial_state, order, version, resumes=resumes, drawn_with=drawn_with)
    state = check_node_state(node, initial_state, keys)
    check_saved_config(node, state, {k: v for k, v in config.items() if k != ORDER_VERSION_KEY})
    target = None
    if state[SHUFFLE_TARGET_KEY] is not None:
        target = check_cursor(node, state, SHUFFLE_TARGET_KEY, 0)
    return state, target
