"""The nodes of a graph, found from its last node.

A plain list, by the graph's structure (each node's public node attributes, `source` by
convention): the `Loader` walks it once, when it is built, to resolve its links
(`loader.graph_links`), and tools and tests find a node of a given class in it. Nothing
looks a peer up in it by method name.
"""

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
