"""Topological order of a graph (iterative, so deep networks do not hit the recursion limit)."""

from __future__ import annotations


def topological_order(outputs) -> list:
    """Return every node the ``outputs`` depend on, each after all of its inputs."""
    order, seen = [], set()
    for root in outputs:
        if id(root) in seen:
            continue
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if expanded:
                order.append(node)
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            stack.append((node, True))
            for i in reversed(node.inputs):
                if id(i) not in seen:
                    stack.append((i, False))
    return order
