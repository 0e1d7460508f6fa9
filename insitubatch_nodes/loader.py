"""A torchdata `Loader` that stops the graph's IO when a for-loop over it stops, and whose
state stays right across chained resumes.

torchdata's Loader hands out one long-lived iterator, so nothing tells the graph that the
user broke out of a loop or that the loop body raised; the fetch threads would idle on.
This subclass iterates through a generator that closes every node that can be closed on
`break`, an exception (KeyboardInterrupt included) or garbage collection, and at the end
of an epoch all but the nodes that read across epochs (`read_across_epochs=True`: they
are reading the next epoch's first blocks, and stop on `close()` or the next epoch).

It also keeps its own iterator. torchdata 0.11's iterator remembers the state it peeked
at when a restored state turns out to be an epoch's end, and keeps returning it after
the next epoch starts (meta-pytorch/data#1552): a checkpoint taken later in that run
would resume at the wrong place. `state_dict()` has the same layout as torchdata's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import torchdata.nodes
from torchdata.nodes import BaseNode

from insitubatch_nodes.nodes.state_checks import (
    check_cursor,
    check_node_state,
    check_state_digest,
    with_digest,
)

T = TypeVar("T")


def graph_nodes(root: BaseNode[Any]) -> list[BaseNode[Any]]:
    """`root` and every node reachable through public attributes (`source` by convention).

    Args:
        root: the graph's last node.
    """
    found: list[BaseNode[Any]] = []
    stack = [root]
    while stack:
        node = stack.pop()
        if any(node is seen for seen in found):
            continue
        found.append(node)
        stack.extend(
            value
            for name, value in vars(node).items()
            if not name.startswith("_") and isinstance(value, BaseNode)
        )
    return found


def close_graph(root: BaseNode[Any], *, epoch_ended: bool = False) -> None:
    """Call `interrupt()`, then `close()`, on every node of the graph that has them (e.g.
    `AsyncFetchNode`). Interrupting first lets a producer thread that waits on a slow read
    (`PinToDeviceNode`) stop at once, before its node waits for it. Every node is closed
    even if one fails to; the first failure is raised after.

    Args:
        root: the graph's last node.
        epoch_ended: the epoch ran to its end, so nodes that read across epochs are left
            running.
    """
    nodes = [
        node
        for node in graph_nodes(root)
        if not (epoch_ended and getattr(node, "read_across_epochs", False))
    ]
    for node in nodes:
        interrupt = getattr(node, "interrupt", None)
        if callable(interrupt):
            interrupt()
    failure: Exception | None = None
    for node in nodes:
        close = getattr(node, "close", None)
        if callable(close):
            try:
                close()
            except Exception as error:
                failure = failure or error
    if failure is not None:
        raise failure


class PeekingIterator(BaseNode[T]):
    """Counts what it yields and can look one item ahead without losing the state from
    before that item (the Loader peeks to tell an exhausted restored state).

    Args:
        root: the graph's last node.
    """

    ROOT_KEY = "root"
    NUM_YIELDED_KEY = "num_yielded"

    def __init__(self, root: BaseNode[T]) -> None:
        super().__init__()
        self.root = root
        self._num_yielded = 0
        self._peeked: tuple[T, dict[str, Any]] | None = None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self._peeked = None
        if initial_state is None:
            self.root.reset(None)
            self._num_yielded = 0
        else:
            self.root.reset(initial_state[self.ROOT_KEY])
            self._num_yielded = initial_state[self.NUM_YIELDED_KEY]

    def has_next(self) -> bool:
        if self._peeked is None:
            state = self.get_state()
            try:
                self._peeked = (next(self.root), state)
            except StopIteration:
                return False
        return True

    def next(self) -> T:
        if self._peeked is not None:
            item, _ = self._peeked
            self._peeked = None
        else:
            item = next(self.root)
        self._num_yielded += 1
        return item

    def get_state(self) -> dict[str, Any]:
        if self._peeked is not None:
            return self._peeked[1]
        return {self.ROOT_KEY: self.root.state_dict(), self.NUM_YIELDED_KEY: self._num_yielded}


class Loader(torchdata.nodes.Loader[T]):
    """torchdata's `Loader` over a graph, closing the graph when a loop over it stops
    (see the module).

    Args:
        root: the graph's last node.
        restart_on_stop_iteration: begin the next epoch at the next `iter()` once an
            epoch ran out (torchdata's meaning).
    """

    def __init__(self, root: BaseNode[T], restart_on_stop_iteration: bool = True) -> None:
        super().__init__(root, restart_on_stop_iteration)
        self._iterator: PeekingIterator[T] | None = None
        self._state_to_load: dict[str, Any] | None = None
        self._started_for_state_dict = False

    def __iter__(self) -> Iterator[T]:  # type: ignore[override]
        if (
            self._iterator is None
            or not self._started_for_state_dict
            or self._state_to_load is not None
        ):
            self._start()
        self._started_for_state_dict = False
        assert self._iterator is not None
        return self._closing(self._iterator)

    def _start(self) -> None:
        """The epoch a new `iter()` begins: the loaded state's, else the next one."""
        if self._iterator is None:
            self._iterator = PeekingIterator(self.root)
        if self._state_to_load is None:
            self._iterator.reset(None)
            return
        state, self._state_to_load = self._state_to_load, None
        self._iterator.reset(state)
        ended = self.restart_on_stop_iteration and not self._iterator.has_next()
        # After the nodes took up their parts (so a cursor out of range is named as such):
        # an edit that left every cursor in range still does not match the digest.
        check_state_digest(state)
        if ended:
            self._iterator.reset(None)  # the state was an epoch's end: begin the next one

    def _closing(self, iterator: Iterator[T]) -> Iterator[T]:
        try:
            yield from iterator
        except BaseException:  # break (GeneratorExit), an error, or garbage collection
            self.close()
            raise
        close_graph(self.root, epoch_ended=True)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Resume from `state_dict` at the next `iter()`. Its own layout is checked now;
        each node checks its part when it takes it up, at that `iter()`.

        Args:
            state_dict: what `state_dict()` returned (through a checkpoint file or not).
        """
        keys = (PeekingIterator.ROOT_KEY, PeekingIterator.NUM_YIELDED_KEY)
        state = check_node_state(self, state_dict, keys, named=False)
        check_cursor(self, state, PeekingIterator.NUM_YIELDED_KEY, 0)
        self._state_to_load = state_dict

    def state_dict(self) -> dict[str, Any]:
        """Where the latest `iter()` stands; before any, where the first would start."""
        if self._iterator is None:
            self._start()
            self._started_for_state_dict = True
        assert self._iterator is not None
        return with_digest(self._iterator.state_dict())

    def close(self) -> None:
        """Stop all background IO now; iterating again picks up where it stopped."""
        close_graph(self.root)

    def __enter__(self) -> Loader[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
