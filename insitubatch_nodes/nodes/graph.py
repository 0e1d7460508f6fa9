"""The nodes of a graph, found from its last node."""

from __future__ import annotations

from typing import Any

from torchdata.nodes import BaseNode


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
