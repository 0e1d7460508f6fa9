"""A torchdata `Loader` that stops the graph's IO when a for-loop over it stops.

torchdata's Loader hands out one long-lived iterator, so nothing tells the graph that the
user broke out of a loop or that the loop body raised; the fetch threads would idle on.
This subclass iterates through a generator whose `finally` closes every node that can be
closed: on exhaustion, `break`, an exception (KeyboardInterrupt included) or garbage
collection. State and resume behave exactly as in torchdata's Loader.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import torchdata.nodes
from torchdata.nodes import BaseNode

T = TypeVar("T")


def graph_nodes(root: BaseNode[Any]) -> list[BaseNode[Any]]:
    """`root` and every node reachable through public attributes (`source` by convention)."""
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


def close_graph(root: BaseNode[Any]) -> None:
    """Call `close()` on every node of the graph that has one (e.g. `AsyncFetchNode`)."""
    for node in graph_nodes(root):
        close = getattr(node, "close", None)
        if callable(close):
            close()


class Loader(torchdata.nodes.Loader[T]):
    def __iter__(self) -> Iterator[T]:  # type: ignore[override]
        return self._closing(super().__iter__())

    def _closing(self, iterator: Iterator[T]) -> Iterator[T]:
        try:
            yield from iterator
        finally:
            self.close()

    def close(self) -> None:
        """Stop all background IO now; the next `iter()` starts it again."""
        close_graph(self.root)

    def __enter__(self) -> Loader[T]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
